import Dispatch
import _ContextStackCore

extension QueuedStore {
    /// Claimed keys kept at most; past that the oldest half is forgotten. A race on a forgotten
    /// key makes two objects, and the one committed second merges into the first one's row
    /// (`mergeClaimedInserts`), never a duplicate
    /// (`FetchOrCreateTests.pastTheClaimLimitARaceOnAForgottenKeyStillMakesOneRow`).
    static var maximumClaims: Int { 50_000 }

    /// The ID a `fetchOrCreate` that found nothing gives the object it creates for `claims`.
    ///
    /// Two update contexts that run `fetchOrCreate` for the same unique values at the same
    /// time both find nothing. The first to get here claims the values for its new ID; the
    /// second gets the same ID, so both create "the same" object. Whichever commits second
    /// finds the row there and saves its values into it (see `mergeClaimedInserts`) instead
    /// of inserting a duplicate. A claim ends when its object is deleted or its keys change.
    package func claim(_ claims: [UniqueClaim], proposed: ObjectID) -> ObjectID {
        state.withLock { state in
            let id: ObjectID
            if claims.count == 1 {
                // One constraint, the common case: one hash of the claim, where looking it up,
                // checking it and setting it hashed it three times (a tenth of an import by
                // `fetchOrCreate`).
                func settle(_ held: inout ObjectID?) -> ObjectID? {
                    if let held { return held }
                    held = proposed
                    return nil
                }
                if let held = settle(&state.claims[claims[0]]) { return held }
                state.claimOrder.append(claims[0])
                id = proposed
            } else {
                id = claims.first(where: { state.claims[$0] != nil }).flatMap { state.claims[$0] } ?? proposed
                for claim in claims where state.claims[claim] == nil {
                    state.claims[claim] = id
                    state.claimOrder.append(claim)
                }
            }
            if state.claims.count > Self.maximumClaims {
                for old in state.claimOrder.prefix(Self.maximumClaims / 2) { state.claims[old] = nil }
                state.claimOrder.removeFirst(Self.maximumClaims / 2)
            }
            return id
        }
    }

    /// Forgets the claims of objects whose keys this commit deletes or changes, or whose keys
    /// the update changed after `fetchOrCreate` made them (`rekeyed`): the values are free
    /// again, and must not bring the old ID back. Runs under the state lock.
    static func releaseClaims(of changes: ChangeSet, in state: inout QueueState) {
        guard !state.claims.isEmpty else { return }
        var released = Set(changes.rekeyed)
        for delete in changes.deletes where !delete.entity.uniqueConstraints.isEmpty { released.insert(delete.id) }
        for update in changes.updates where update.slots.contains(where: update.entity.uniqueSlots.contains) {
            released.insert(update.id)
        }
        guard !released.isEmpty else { return }
        state.claims = state.claims.filter { !released.contains($0.value) }
        state.claimOrder.removeAll { state.claims[$0] == nil }
    }

    // MARK: - Checking a commit

    /// Turns inserts of claimed objects whose row another commit has saved meanwhile into
    /// updates of that row: the values this object was given (those that differ from the
    /// attribute defaults, and the `fetchOrCreate` values) are merged into it, property by
    /// property, this commit winning. Returns, besides, the objects merged into rows another
    /// process saved (`adoptSavedRows`), each with its row.
    static func mergeClaimedInserts(_ changes: ChangeSet, reader: inout RowReader) throws -> (changes: ChangeSet, merged: [ObjectID: ObjectID]) {
        guard !changes.upserts.isEmpty else { return (changes, [:]) }
        var result = changes
        result.inserts = []
        for insert in changes.inserts {
            guard let assigned = changes.upserts[insert.id], let existing = try reader.row(insert.id),
                  existing.entity === insert.row.entity
            else {
                result.inserts.append(insert)
                continue
            }
            let entity = insert.row.entity
            // The row must still hold the unique values both were made for: the other claimant
            // may have given its object other ones since (a later commit of its update), and
            // merging into it would undo that without a word.
            let moved = assigned.filter { entity.uniqueSlots.contains($0) && !insert.row.values[$0].isIdentical(to: existing.values[$0]) }
            if !moved.isEmpty {
                throw MergeConflictError(conflicts: moved.map {
                    .init(objectID: insert.id, key: entity.properties[$0].name, snapshot: insert.row.values[$0],
                          stored: existing.values[$0], ours: insert.row.values[$0])
                }, explanation: """
                    another fetchOrCreate of these unique values saved the object first and has since given it others, \
                    which merging into it would undo, whatever the merge policy; fetchOrCreate again
                    """)
            }
            var slots: [Int] = []
            var values: [Value] = []
            for slot in entity.storedSlots {
                let value = insert.row.values[slot]
                let given = assigned.contains(slot) || !value.isIdentical(to: entity.defaults[slot])
                if given && !value.isIdentical(to: existing.values[slot]) {
                    slots.append(slot)
                    values.append(value)
                }
            }
            var current = existing.values
            for (slot, value) in zip(slots, values) { current[slot] = value }
            result.updates.append(.init(id: insert.id, entity: entity, slots: slots, values: values,
                                        snapshot: existing.values, current: current))
        }
        // The claims of objects still inserted stay: a store shared with other processes looks
        // for their values again when it writes them (`PostgresStore.writeClaiming`).
        let inserted = Set(result.inserts.map(\.id))
        result.upserts = changes.upserts.filter { inserted.contains($0.key) }
        guard let adoption = try adoptSavedRows(result, reader: &reader) else { return (result, [:]) }
        return (adoption.saved, adoption.merged)
    }

    // MARK: - fetchOrCreate across processes

    /// The commit with each claimed insert whose unique values a saved row already holds
    /// turned into an update of that row, or `nil` when there is none.
    ///
    /// Within one process, `fetchOrCreate`s that found nothing agree on one ID (`claim`).
    /// Another process cannot take part in that: when it saved an object for the same unique
    /// values between this `fetchOrCreate` and this commit, the object made here is not
    /// inserted, its values are merged into the saved row (property by property, this commit
    /// winning, as the second of two `fetchOrCreate`s in one process merges), and references
    /// to it in the same commit point at that row. `reader` decides what is saved (a store
    /// may read with rows locked: `locking` locks the saved rows it finds, so that they stay as
    /// read until the reader's transaction ends).
    package static func adoptSavedRows(_ changes: ChangeSet, reader: inout RowReader,
                                       locking: Bool = false) throws -> Adoption? {
        var adopted: [ObjectID: ObjectID] = [:]
        var pendingKeys: [ObjectIdentifier: [[Value]: [ObjectID]]] = [:]
        for insert in changes.inserts where changes.upserts[insert.id] != nil {
            for constraint in insert.row.entity.uniqueConstraints {
                guard let key = constraint.key(in: insert.row.values) else { continue }
                // A row holds the values if it does as the reader sees it: a commit queued
                // before this one may have changed them (or deleted the row) without being
                // written yet, and may have given them to a row the table does not hold yet.
                if pendingKeys[ObjectIdentifier(constraint)] == nil {
                    pendingKeys[ObjectIdentifier(constraint)] = try pendingRows(constraint, reader: &reader)
                }
                let candidates = try storedRows(constraint, key, reader: &reader, locking: locking)
                    + (pendingKeys[ObjectIdentifier(constraint)]?[key] ?? [])
                let saved = try candidates.first { other in
                    guard other != insert.id, let row = try reader.row(other) else { return false }
                    return row.entity === insert.row.entity && constraint.key(in: row.values) == key
                }
                if let saved {
                    adopted[insert.id] = saved
                    break
                }
            }
        }
        guard !adopted.isEmpty else { return nil }
        return try adopt(changes, adopted, reader: &reader)
    }

    /// `changes` with the inserts of `adopted`'s keys merged into the rows of its values; `nil`
    /// when a join pair of the commit cannot be pointed at the saved row (its ends are unknown).
    package static func adopt(_ changes: ChangeSet, _ adopted: [ObjectID: ObjectID],
                              reader: inout RowReader) throws -> Adoption? {
        if changes.links.contains(where: { changes.linkEnds[$0.key] == nil }) { return nil }
        var rest = changes
        rest.inserts = changes.inserts.filter { adopted[$0.id] == nil }
        rest.upserts = changes.upserts.filter { adopted[$0.key] == nil }
        var (saved, correction) = try redirect(rest, to: adopted) ?? (rest, ChangeSet())
        for insert in changes.inserts {
            guard let target = adopted[insert.id] else { continue }
            guard let stored = try reader.row(target), stored.entity === insert.row.entity else { return nil }
            let entity = stored.entity
            var values = insert.row.values
            _ = point(&values, of: entity) { $0.flatMap { adopted[$0] } }
            let assigned = changes.upserts[insert.id] ?? []
            var slots: [Int] = []
            var given: [Value] = []
            for slot in entity.storedSlots where assigned.contains(slot) || !values[slot].isIdentical(to: entity.defaults[slot]) {
                if !values[slot].isIdentical(to: stored.values[slot]) {
                    slots.append(slot)
                    given.append(values[slot])
                }
            }
            var current = stored.values
            for (slot, value) in zip(slots, given) { current[slot] = value }
            saved.updates.append(.init(id: target, entity: entity, slots: slots, values: given, snapshot: stored.values, current: current))
            correction.deletes.append((insert.id, entity))
            correction.updates.append(.init(id: target, entity: entity, slots: entity.storedSlots, values: entity.storedSlots.map { current[$0] }))
        }
        return Adoption(saved: saved, correction: correction, merged: adopted)
    }

    /// `changes` with every mention of an object of `merged` — one a `fetchOrCreate` made whose
    /// insert was merged into a saved row (`adopt`) — turned into a mention of that row, and what
    /// tells receivers that were shown `changes` the same; `nil` when it mentions none.
    ///
    /// A commit made while a context still held such an object, before the correction that
    /// replaces it reached the context, names it. Written so, its to-ones would point at a row
    /// that never was, and its update would change none. The object *is* the saved row, as the
    /// merge said: to-ones and join pairs that name it name the row (in what the commit changes,
    /// and in the values its updates were made from, which merge policies compare with the
    /// store); an update of it updates the row, this commit winning on what it changes (nothing
    /// stored is older than the merge it could be compared with). An object the commit inserts
    /// itself (a `fetchOrCreate` that agreed with the merged one) is left to `adoptSavedRows`.
    ///
    /// - Throws: `SaveError.Code.deletesMergedObject` for a commit that deletes such an object:
    ///   its delete rules ran over the object the context knew, not over the saved row's
    ///   relationships, which another process made.
    package static func redirect(_ changes: ChangeSet, to merged: [ObjectID: ObjectID]) throws(SaveError) -> (saved: ChangeSet, correction: ChangeSet)? {
        guard !merged.isEmpty else { return nil }
        let inserted = Set(changes.inserts.lazy.map(\.id).filter { merged[$0] != nil })
        func savedRow(of id: ObjectID?) -> ObjectID? {
            guard let id, !inserted.contains(id) else { return nil }
            return merged[id]
        }
        for delete in changes.deletes {
            if let row = savedRow(of: delete.id) { throw .deletesMergedObject(delete.id, mergedInto: row) }
        }
        var saved = changes
        var correction = ChangeSet()
        var changed = false
        for index in saved.inserts.indices {
            let row = saved.inserts[index].row
            var values = row.values
            let slots = point(&values, of: row.entity, to: savedRow)
            guard !slots.isEmpty else { continue }
            saved.inserts[index].row = ObjectRow(entity: row.entity, values: values)
            correction.updates.append(.init(id: saved.inserts[index].id, entity: row.entity, slots: slots, values: slots.map { values[$0] }))
        }
        for index in saved.updates.indices {
            var update = saved.updates[index]
            var pointed: [Int] = []
            for position in update.slots.indices {
                let slot = update.slots[position]
                guard let target = savedRow(of: update.entity.properties[slot].destinationID(of: update.values[position])) else { continue }
                update.values[position] = .integer(target.primaryKey)
                pointed.append(position)
            }
            let inSnapshot = !point(&update.snapshot, of: update.entity, to: savedRow).isEmpty
            let inCurrent = !point(&update.current, of: update.entity, to: savedRow).isEmpty
            if let target = savedRow(of: update.id) {
                // No snapshot: what the context started from was never stored (`resolve`).
                update = .init(id: target, entity: update.entity, slots: update.slots, values: update.values)
                correction.updates.append(update)
            } else if !pointed.isEmpty {
                correction.updates.append(.init(id: update.id, entity: update.entity, slots: pointed.map { update.slots[$0] },
                                                values: pointed.map { update.values[$0] }))
            } else if !inSnapshot && !inCurrent {
                continue
            }
            saved.updates[index] = update
            changed = true
        }
        for index in saved.links.indices {
            let link = saved.links[index]
            guard let ends = saved.linkEnds[link.key] else { continue }
            let source = savedRow(of: ends.source) ?? ends.source
            let target = savedRow(of: ends.target) ?? ends.target
            guard source != ends.source || target != ends.target else { continue }
            let key = LinkKey(table: link.key.table, source: source.primaryKey, target: target.primaryKey)
            // A row an object merged into is of the object's entity (`adoptSavedRows`).
            var pointedEnds = ends
            (pointedEnds.source, pointedEnds.target) = (source, target)
            saved.links[index] = (key, link.present)
            saved.linkEnds[link.key] = nil
            saved.linkEnds[key] = pointedEnds
            correction.links += [(link.key, false), (key, link.present)]
            correction.linkEnds[link.key] = ends
            correction.linkEnds[key] = pointedEnds
        }
        return changed || !correction.isEmpty ? (saved, correction) : nil
    }

    /// Points every to-one of `values`, a whole row of `entity` (or none), whose object `row`
    /// names a saved row for at that row; returns the slots it changed.
    private static func point(_ values: inout ContiguousArray<Value>, of entity: ResolvedEntity,
                              to row: (ObjectID?) -> ObjectID?) -> [Int] {
        var slots: [Int] = []
        for property in entity.properties {
            guard property.slot < values.count, let target = row(property.destinationID(of: values[property.slot])) else { continue }
            values[property.slot] = .integer(target.primaryKey)
            slots.append(property.slot)
        }
        return slots
    }

    /// Throws `SaveError.Code.uniquenessViolated` when, after `changes`, two rows would hold
    /// the same values of a uniqueness constraint. `reader` sees the store with every commit
    /// queued before this one (the overlay), so the check is exact within this process.
    static func checkUniqueness(_ changes: ChangeSet, reader: inout RowReader) throws {
        let deleted = Set(changes.deletes.map(\.id))
        // The rows whose constrained values this commit sets, with their values afterwards.
        var rows: [(id: ObjectID, values: ContiguousArray<Value>, constraints: [UniqueConstraint])] = []
        for insert in changes.inserts where !insert.row.entity.uniqueConstraints.isEmpty {
            rows.append((insert.id, insert.row.values, insert.row.entity.uniqueConstraints))
        }
        for update in changes.updates where update.slots.contains(where: update.entity.uniqueSlots.contains) {
            guard var row = try reader.row(update.id)?.values else { continue }
            for (slot, value) in zip(update.slots, update.values) { row[slot] = value }
            let touched = update.entity.uniqueConstraints.filter { $0.slots.contains(where: update.slots.contains) }
            rows.append((update.id, row, touched))
        }
        guard !rows.isEmpty else { return }

        // Within the commit. Each constraint's tables are sized once, for the rows it covers:
        // growing them by doubling rehashed every key of an import.
        var covered: [ObjectIdentifier: Int] = [:]
        for row in rows {
            for constraint in row.constraints { covered[ObjectIdentifier(constraint), default: 0] += 1 }
        }
        var mine = covered.mapValues { [[Value]: ObjectID](minimumCapacity: $0) }
        var checked = covered.mapValues { Set<ObjectID>(minimumCapacity: $0) }
        for row in rows {
            for constraint in row.constraints {
                guard let key = constraint.key(in: row.values) else { continue }
                let slot = ObjectIdentifier(constraint)
                if let other = mine[slot]![key], other != row.id {
                    throw violation(constraint, key, row.id, other)
                }
                mine[slot]![key] = row.id
                checked[slot]!.insert(row.id)
            }
        }

        // Against what is saved or queued: other rows keep their values unless this commit
        // deletes them or sets their constrained values (checked above).
        var pendingKeys: [ObjectIdentifier: [[Value]: [ObjectID]]] = [:]
        for row in rows {
            for constraint in row.constraints {
                guard let key = constraint.key(in: row.values) else { continue }
                let slot = ObjectIdentifier(constraint)
                func conflicts(_ other: ObjectID) throws -> Bool {
                    guard other != row.id, !deleted.contains(other), checked[slot]?.contains(other) != true,
                          let stored = try reader.row(other), constraint.entity.includes(stored.entity) else { return false }
                    return constraint.key(in: stored.values) == key
                }
                for other in try storedRows(constraint, key, reader: &reader) where try conflicts(other) {
                    throw violation(constraint, key, row.id, other)
                }
                if pendingKeys[slot] == nil {
                    pendingKeys[slot] = try pendingRows(constraint, reader: &reader)
                }
                for other in pendingKeys[slot]?[key] ?? [] where try conflicts(other) {
                    throw violation(constraint, key, row.id, other)
                }
            }
        }
    }

    /// The stored rows holding `key` (before the overlay); with `locking`, locked until the
    /// reader's transaction ends (`FOR UPDATE`: a writer's transaction on PostgreSQL). Read once
    /// by a reader that keeps them (`RowReader.storedHolders`; its view of the store does not
    /// change), unless they are to be locked.
    private static func storedRows(_ constraint: UniqueConstraint, _ key: [Value], reader: inout RowReader, locking: Bool = false) throws -> [ObjectID] {
        let memo = reader.storedHolders == nil ? nil : RowReader.UniqueKey(constraint: ObjectIdentifier(constraint), values: key)
        if !locking, let memo, let known = reader.storedHolders?[memo] { return known }
        let sql = locking ? constraint.selectHoldersSQL + " FOR UPDATE" : constraint.selectHoldersSQL
        var ids: [ObjectID] = []
        let root = constraint.entity.rootDescription
        try reader.session.connection.select(sql, key) { row in ids.append(ObjectID(rootEntity: root, primaryKey: row.int64(0))) }
        if let memo { reader.storedHolders?[memo] = ids }
        return ids
    }

    /// The rows queued commits insert or whose constrained values they change, by their key.
    private static func pendingRows(_ constraint: UniqueConstraint, reader: inout RowReader) throws -> [[Value]: [ObjectID]] {
        var result: [[Value]: [ObjectID]] = [:]
        for (id, entry) in reader.session.overlay.rows(of: constraint.entity.rootDescription) {
            switch entry.pending {
            case .inserted:
                break
            case .updated(_, let slots, _) where constraint.slots.contains(where: slots.contains):
                break
            default:
                continue
            }
            guard let row = try reader.row(id), constraint.entity.includes(row.entity),
                  let key = constraint.key(in: row.values) else { continue }
            result[key, default: []].append(id)
        }
        return result
    }

    /// The error for `id` taking `key` from `other`. The values are in `values`, never in the
    /// message, so logging the error does not leak data.
    private static func violation(_ constraint: UniqueConstraint, _ key: [Value], _ id: ObjectID, _ other: ObjectID) -> SaveError {
        SaveError(.uniquenessViolated,
                         "Cannot save \(id): \(other) already holds the same \(constraint.label), which is unique (the values are in SaveError.values). Nothing of this commit was saved; change the value, or use update.fetchOrCreate to reuse the existing object.",
                         objects: [id, other], entityName: constraint.entity.name, keys: constraint.keys, values: key)
    }
}

/// A commit whose claimed inserts were merged into saved rows (`QueuedStore.adoptSavedRows`).
package struct Adoption: Sendable {
    /// What is written.
    package var saved: ChangeSet
    /// What tells receivers that were shown the commit what became of it: the merged objects
    /// deleted, the saved rows as they are now, references to the objects pointed at them.
    package var correction: ChangeSet
    /// Each merged object, with the saved row it became.
    package var merged: [ObjectID: ObjectID]
}
