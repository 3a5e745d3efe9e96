import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// What one commit (or one reset) changed in a `FetchedResults`, in the form a table or
/// collection view applies in one batch update.
///
/// Coordinates follow the batch-update convention: everything that removes — `deletedSections`,
/// `deletedRows`, `updatedRows` and the `from` side of `movedRows` — is in the *old* index
/// space (before the change); everything that adds — `insertedSections`, `insertedRows` and the
/// `to` side of `movedRows` — is in the *new* index space (after it). Apply removals first
/// (rows in descending order, then sections), then insertions (sections, then rows in
/// ascending order). Rows inside a deleted section are not listed (the section takes them),
/// nor rows inside an inserted section (read the section's objects from the results); an
/// object that leaves a deleted section or enters an inserted one is a delete plus an insert,
/// never a move.
///
/// For example:
///
/// ```swift
/// results.onChange = { change in
///     // Off screen, or after a wholesale replacement, let the table read everything afresh: a
///     // table view that has not laid out yet (or has a reload pending) reads its counts when the
///     // batch starts, and would find the new ones before the batch's own changes.
///     guard !change.isReload, tableView.window != nil else { return tableView.reloadData() }
///     tableView.performBatchUpdates {
///         tableView.deleteSections(IndexSet(change.deletedSections), with: .fade)
///         tableView.insertSections(IndexSet(change.insertedSections), with: .fade)
///         tableView.deleteRows(at: change.deletedRows, with: .fade)
///         tableView.insertRows(at: change.insertedRows, with: .fade)
///         for move in change.movedRows { tableView.moveRow(at: move.from, to: move.to) }
///         tableView.reloadRows(at: change.updatedRows, with: .none)
///     }
///     // A moved row keeps its cell: show the moved object's new values (the farmer's new name).
///     tableView.reconfigureRows(at: change.movedRows.map(\.to))
/// }
/// ```
public struct ResultsChange: Sendable, CustomStringConvertible {
    /// One object's move, from its old index path to its new one.
    public struct Move: Sendable, Hashable {
        /// Where the object was (old coordinates).
        public let from: IndexPath
        /// Where it is now (new coordinates).
        public let to: IndexPath
    }

    /// Sections that are gone, by their old index, ascending.
    public internal(set) var deletedSections: [Int] = []
    /// Sections that are new, by their new index, ascending.
    public internal(set) var insertedSections: [Int] = []
    /// Objects that left the results, at their old index paths, ascending.
    public internal(set) var deletedRows: [IndexPath] = []
    /// Objects that entered the results, at their new index paths, ascending.
    public internal(set) var insertedRows: [IndexPath] = []
    /// Objects that changed place (a sort or section key changed), ascending by `to`.
    /// A moved object may also have changed in other ways: configure it anew at `to`.
    public internal(set) var movedRows: [Move] = []
    /// Objects that stayed in place and changed, at their old index paths, ascending.
    public internal(set) var updatedRows: [IndexPath] = []
    /// True when the results were replaced wholesale (an `objectFilter`): then every old
    /// section is in `deletedSections`, every new one in `insertedSections`, and there are no
    /// row changes. A table view can simply `reloadData()`.
    public internal(set) var isReload = false

    /// True when nothing changed.
    public var isEmpty: Bool {
        deletedSections.isEmpty && insertedSections.isEmpty && deletedRows.isEmpty && insertedRows.isEmpty
            && movedRows.isEmpty && updatedRows.isEmpty
    }

    mutating func normalize() {
        deletedSections.sort()
        insertedSections.sort()
        deletedRows.sort()
        insertedRows.sort()
        movedRows.sort { $0.to < $1.to }
        updatedRows.sort()
    }

    public var description: String {
        var parts: [String] = []
        if isReload { parts.append("reload") }
        if !deletedSections.isEmpty { parts.append("deletedSections: \(deletedSections)") }
        if !insertedSections.isEmpty { parts.append("insertedSections: \(insertedSections)") }
        func paths(_ paths: [IndexPath]) -> String { "[" + paths.map { "\($0[0]).\($0[1])" }.joined(separator: ", ") + "]" }
        if !deletedRows.isEmpty { parts.append("deleted: \(paths(deletedRows))") }
        if !insertedRows.isEmpty { parts.append("inserted: \(paths(insertedRows))") }
        if !movedRows.isEmpty {
            parts.append("moved: [" + movedRows.map { "\($0.from[0]).\($0.from[1])→\($0.to[0]).\($0.to[1])" }.joined(separator: ", ") + "]")
        }
        if !updatedRows.isEmpty { parts.append("updated: \(paths(updatedRows))") }
        return "ResultsChange(" + (parts.isEmpty ? "no change" : parts.joined(separator: ", ")) + ")"
    }
}

/// The contents of results as the diff sees them: sections of object IDs, each with its key.
struct SectionedIDs {
    var sections: [(value: Value, ids: [ObjectID])]
}

enum ResultsDiff {
    /// The batch that turns `old` into `new`: sections matched by value, objects by ID, and the
    /// fewest moves (a longest increasing subsequence keeps the most objects in place).
    /// `updated` tells which objects present in both changed.
    static func diff(_ old: SectionedIDs, _ new: SectionedIDs, updated: (ObjectID) -> Bool) -> ResultsChange {
        var change = ResultsChange()
        var oldSection: [Value: Int] = [:]
        var newSection: [Value: Int] = [:]
        for (index, section) in old.sections.enumerated() { oldSection[section.value] = index }
        for (index, section) in new.sections.enumerated() { newSection[section.value] = index }
        var newPlace: [ObjectID: (section: Int, item: Int)] = [:]
        for (s, section) in new.sections.enumerated() {
            for (i, id) in section.ids.enumerated() { newPlace[id] = (s, i) }
        }
        var oldPlace: [ObjectID: (section: Int, item: Int)] = [:]
        var stays = Set<ObjectID>()
        for (s, section) in old.sections.enumerated() {
            guard let target = newSection[section.value] else {
                change.deletedSections.append(s)
                for (i, id) in section.ids.enumerated() { oldPlace[id] = (s, i) }
                continue
            }
            // Objects that stay in this section: keep the longest run already in order.
            var candidates: [(id: ObjectID, newItem: Int)] = []
            for (i, id) in section.ids.enumerated() {
                oldPlace[id] = (s, i)
                if let place = newPlace[id], place.section == target { candidates.append((id, place.item)) }
            }
            for index in longestIncreasing(candidates.map(\.newItem)) { stays.insert(candidates[index].id) }
        }
        for (s, section) in new.sections.enumerated() where oldSection[section.value] == nil {
            change.insertedSections.append(s)
        }
        let deletedSections = Set(change.deletedSections)
        let insertedSections = Set(change.insertedSections)
        for (s, section) in old.sections.enumerated() where !deletedSections.contains(s) {
            for (i, id) in section.ids.enumerated() {
                let from = IndexPath.at(s, i)
                guard let place = newPlace[id] else {
                    change.deletedRows.append(from)
                    continue
                }
                if stays.contains(id) {
                    if updated(id) { change.updatedRows.append(from) }
                } else if insertedSections.contains(place.section) {
                    change.deletedRows.append(from)
                } else {
                    change.movedRows.append(.init(from: from, to: .at(place.section, place.item)))
                }
            }
        }
        for (s, section) in new.sections.enumerated() where !insertedSections.contains(s) {
            for (i, id) in section.ids.enumerated() {
                guard let place = oldPlace[id] else {
                    change.insertedRows.append(.at(s, i))
                    continue
                }
                if deletedSections.contains(place.section) { change.insertedRows.append(.at(s, i)) }
            }
        }
        change.normalize()
        return change
    }

    /// The batch that replaces everything: all old sections out, all new ones in.
    static func reload(oldSectionCount: Int, newSectionCount: Int) -> ResultsChange {
        var change = ResultsChange()
        change.isReload = true
        change.deletedSections = Array(0..<oldSectionCount)
        change.insertedSections = Array(0..<newSectionCount)
        return change
    }

    /// The indices of one longest strictly increasing subsequence of `values`, ascending.
    static func longestIncreasing(_ values: [Int]) -> [Int] {
        guard !values.isEmpty else { return [] }
        var tails: [Int] = []          // index into `values` of the smallest tail of each length
        var previous = [Int](repeating: -1, count: values.count)
        for (index, value) in values.enumerated() {
            var low = 0, high = tails.count
            while low < high {
                let mid = (low + high) / 2
                if values[tails[mid]] < value { low = mid + 1 } else { high = mid }
            }
            if low > 0 { previous[index] = tails[low - 1] }
            if low == tails.count { tails.append(index) } else { tails[low] = index }
        }
        var result: [Int] = []
        var index = tails.last!
        while index >= 0 {
            result.append(index)
            index = previous[index]
        }
        return result.reversed()
    }
}
