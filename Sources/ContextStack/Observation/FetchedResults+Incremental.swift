import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// Keeping results up to date from a commit's change set alone.
///
/// The objects a commit touched are taken out of the sections, their current rows are tested
/// against the condition in memory, and those that match are put back where the order says —
/// binary searches, so a commit touching k objects of n costs about k log n comparisons. The
/// objects the commit did not touch keep their order, which is what makes the batch small:
/// a touched object that lands between the same untouched neighbours it had is an update in
/// place, any other one that stays in the results is a move.
extension FetchedResults {
    /// A touched object's place among the objects the commit did not touch.
    private struct Slot: Hashable {
        let section: Int
        let item: Int
    }

    /// Where the object `id`, placed by `values`, is in the sections; `nil` if it is not there.
    func locate(_ id: ObjectID, _ values: ContiguousArray<Value>) throws -> IndexPath? {
        let (s, found) = sectionIndex(of: sectionValue(values))
        guard found else { return nil }
        let i = try insertionIndex(in: s, id, values)
        guard i < sections[s].objects.count, sections[s].objects[i].objectID == id else { return nil }
        return .at(s, i)
    }

    /// The index of the section holding `value`, or where it would go.
    private func sectionIndex(of value: Value) -> (index: Int, found: Bool) {
        if keepsEmptySection { return (0, true) }
        var low = 0, high = sections.count
        while low < high {
            let mid = (low + high) / 2
            if sectionBefore(sections[mid].value, value) { low = mid + 1 } else { high = mid }
        }
        return (low, low < sections.count && sections[low].value == value)
    }

    /// The first index of section `s` whose object does not sort before (`id`, `values`).
    ///
    /// Most of a live commit's time on 100,000 objects is these searches, so each step reads
    /// only what it compares. The section's arrays are taken once (read through `sections[s]`
    /// at every step, each read copied the section, its two arrays retained and released), and
    /// an object's ID is read without taking the object: in this generic class, `objects[mid]`
    /// copies a `T`, a retain and a release through the object's weak-reference side table.
    private func insertionIndex(in s: Int, _ id: ObjectID, _ values: ContiguousArray<Value>) throws -> Int {
        let (objects, rows) = (sections[s].objects, sections[s].rows)
        return try objects.withUnsafeBufferPointer { buffer in
            // `T` is a class: each element is one strong reference, read here as an
            // `Unmanaged` reference, unretained, while `objects` holds it.
            try buffer.withMemoryRebound(to: Unmanaged<ManagedObject>.self) { references in
                var low = 0, high = references.count
                while low < high {
                    let mid = (low + high) / 2
                    let objectID = references[mid]._withUnsafeGuaranteedRef { $0.objectID }
                    if try query.sortsBefore((objectID, rows[mid]), (id, values), resolve: { _ in nil }) {
                        low = mid + 1
                    } else {
                        high = mid
                    }
                }
                return low
            }
        }
    }

    /// Brings the sections up to date with the objects `touched` by a commit, and reports the
    /// change. For orders on the entity's own attributes; a condition may read through to-one
    /// key paths, and then the objects whose paths reach one of `changed` (keys by root
    /// entity) are touched too.
    func applyIncrementally(_ touchedByCommit: [ObjectID], referencing changed: [ObjectIdentifier: Set<Int64>] = [:]) throws {
        let core = context.core
        // The touched objects as the context sees them now, those that belong in the results.
        core.beginRead()
        let fresh: [(id: ObjectID, row: ObjectRow)]
        var touched = touchedByCommit
        // The objects the commit changed, or whose key paths lead to an object it changed: of
        // the others looked at (pending, so the store cannot say where their paths lead), one
        // that stays where it was is no update of this commit's.
        var reached: Set<ObjectID>?
        do {
            defer { core.endRead() }
            fresh = try core.read { session in
                var reader = RowReader(session: session, context: core)
                if !query.hopChains.isEmpty {
                    // Objects whose key paths lead to a changed object, and objects whose own
                    // foreign keys are not written yet (the store cannot say where they lead).
                    var more = reader.pendingIDs(of: query.entity.rootDescription)
                    for chain in query.hopChains {
                        more.formUnion(try reader.referencing(chain, from: query.entity, changed: changed))
                    }
                    var seen = Set(touched)
                    for id in more.sorted() where seen.insert(id).inserted { touched.append(id) }
                    if touched.count > touchedByCommit.count {
                        var viaCommit = Set(touchedByCommit)
                        let others = Set(touched[touchedByCommit.count...])
                        for chain in query.hopChains where !changed.isEmpty {
                            viaCommit.formUnion(try reader.leading(others, along: chain, to: changed))
                        }
                        reached = viaCommit
                    }
                }
                var result: [(id: ObjectID, row: ObjectRow)] = []
                for id in touched {
                    guard let row = try reader.row(id), query.accepts(row.entity) else { continue }
                    if try query.matches(id, row.values, resolve: { try reader.row($0) }, members: { try reader.members(of: $0, $1) }) {
                        result.append((id, row))
                    }
                }
                return result
            }
        }
        var entering: [(id: ObjectID, object: T, values: ContiguousArray<Value>)] = []
        for (id, row) in fresh {
            if let object = core.materialize(id, row) as? T { entering.append((id, object, row.values)) }
        }

        // Where the touched objects were, found by the values they were placed by.
        var leaving: [(id: ObjectID, section: Int, item: Int, value: Value)] = []
        for id in touched {
            guard let values = placed[id] else { continue }
            guard let path = try locate(id, values) else {
                return try recover(touched)
            }
            leaving.append((id, path[0], path[1], sectionValue(values)))
        }
        leaving.sort { ($0.section, $0.item) < ($1.section, $1.item) }
        let oldSectionCount = sections.count

        // Take them out: the untouched objects remain, in their unchanged order. Each section
        // at once (`remove(atSortedIndices:)`): one at a time moved the section's tail for each.
        var start = 0
        while start < leaving.count {
            let section = leaving[start].section
            var end = start
            while end < leaving.count && leaving[end].section == section { end += 1 }
            // A closure, not `\.item`: a key path in this generic class is made at run time.
            let items = leaving[start..<end].map { $0.item }
            sections[section].objects.remove(atSortedIndices: items)
            sections[section].rows.remove(atSortedIndices: items)
            start = end
        }
        var oldSlots: [ObjectID: Slot] = [:]
        var oldRank: [ObjectID: Int] = [:]
        var takenBefore = 0, currentSection = -1
        for (rank, hit) in leaving.enumerated() {
            if hit.section != currentSection { (currentSection, takenBefore) = (hit.section, 0) }
            oldSlots[hit.id] = Slot(section: hit.section, item: hit.item - takenBefore)
            oldRank[hit.id] = rank
            takenBefore += 1
        }

        // Objects back between the same untouched neighbours stay; among several in one gap,
        // the longest run still in the old order does.
        try entering.sort { try query.sortsBefore(($0.id, $0.values), ($1.id, $1.values), resolve: { _ in nil }) }
        var gaps: [Slot: [Int]] = [:]
        for (index, entry) in entering.enumerated() {
            guard let oldSlot = oldSlots[entry.id] else { continue }
            let (s, found) = sectionIndex(of: sectionValue(entry.values))
            guard found, s == oldSlot.section else { continue }
            let slot = Slot(section: s, item: try insertionIndex(in: s, entry.id, entry.values))
            if slot == oldSlot { gaps[slot, default: []].append(index) }
        }
        var stays = Set<ObjectID>()
        for members in gaps.values {
            let ranks = members.map { oldRank[entering[$0].id] ?? 0 }
            for i in ResultsDiff.longestIncreasing(ranks) { stays.insert(entering[members[i]].id) }
        }

        // Put the entering objects in, in order, making sections as needed: their places among
        // the objects that stayed first, then each section's at once (`insert(_:)`, as above).
        var madeSections: [Value] = []
        for entry in entering {
            let value = sectionValue(entry.values)
            let (s, found) = sectionIndex(of: value)
            if !found {
                sections.insert(Section(value: value, objects: [], rows: []), at: s)
                madeSections.append(value)
            }
        }
        var arriving: [Int: [(position: Int, object: T, values: ContiguousArray<Value>)]] = [:]
        for entry in entering {
            // A section the order cannot find again once made (comparisons that disagree with
            // each other): fetched again, as `locate` failing would have it.
            let (s, found) = sectionIndex(of: sectionValue(entry.values))
            guard found else { return try recover(touched, oldSectionCount: oldSectionCount) }
            arriving[s, default: []].append((try insertionIndex(in: s, entry.id, entry.values), entry.object, entry.values))
        }
        for (s, var items) in arriving {
            // In order already, unless the order's comparisons disagree with each other.
            if zip(items, items.dropFirst()).contains(where: { $0.position > $1.position }) {
                items = items.enumerated().sorted { ($0.element.position, $0.offset) < ($1.element.position, $1.offset) }.map { $0.element }
            }
            sections[s].objects.insert(items.map { ($0.position, $0.object) })
            sections[s].rows.insert(items.map { ($0.position, $0.values) })
        }
        // Sections left empty are gone.
        var goneSections: [Int] = []
        var goneValues = Set<Value>()
        if !keepsEmptySection {
            var seen = Set<Int>()
            for hit in leaving where seen.insert(hit.section).inserted {
                let (s, found) = sectionIndex(of: hit.value)
                if found && sections[s].objects.isEmpty {
                    sections.remove(at: s)
                    goneSections.append(hit.section)
                    goneValues.insert(hit.value)
                }
            }
        }

        // The batch: removals in old coordinates, additions in new ones.
        var change = ResultsChange()
        change.deletedSections = goneSections
        let made = Set(madeSections)
        change.insertedSections = madeSections.map { sectionIndex(of: $0).index }
        var newPaths: [ObjectID: (path: IndexPath, section: Value)] = [:]
        for entry in entering {
            guard let path = try locate(entry.id, entry.values) else {
                return try recover(touched, oldSectionCount: oldSectionCount)
            }
            newPaths[entry.id] = (path, sectionValue(entry.values))
        }
        for hit in leaving {
            let from = IndexPath.at(hit.section, hit.item)
            let fromGone = goneValues.contains(hit.value)
            guard let to = newPaths[hit.id] else {
                if !fromGone { change.deletedRows.append(from) }
                continue
            }
            if stays.contains(hit.id) {
                if reached?.contains(hit.id) ?? true { change.updatedRows.append(from) }
            } else if fromGone || made.contains(to.section) {
                if !fromGone { change.deletedRows.append(from) }
                if !made.contains(to.section) { change.insertedRows.append(to.path) }
            } else {
                change.movedRows.append(.init(from: from, to: to.path))
            }
        }
        for entry in entering where oldSlots[entry.id] == nil {
            guard let to = newPaths[entry.id], !made.contains(to.section) else { continue }
            change.insertedRows.append(to.path)
        }
        for hit in leaving { placed[hit.id] = nil }
        for entry in entering { placed[entry.id] = entry.values }
        change.normalize()
        if !change.isEmpty { emit(change) }
    }

    /// The sections do not hold an object where its values say (which the incremental path
    /// never lets happen): refetch. Before the sections were touched, the difference is
    /// exact; after, the consumer is told to reload.
    private func recover(_ touched: [ObjectID], oldSectionCount: Int? = nil) throws {
        assertionFailure("FetchedResults lost track of an object; refetching.")
        guard let oldSectionCount else {
            try reload(touched: Set(touched))
            return
        }
        sections = try fetchSections()
        indexAll()
        emit(ResultsDiff.reload(oldSectionCount: oldSectionCount, newSectionCount: sections.count))
    }
}
