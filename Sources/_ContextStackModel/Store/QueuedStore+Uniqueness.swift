import Dispatch
import _ContextStackCore

extension QueuedStore {
    /// Claimed keys kept at most; past that the oldest are forgotten (a race on a forgotten
    /// key ends in `SaveError.Code.uniquenessViolated`, never in a duplicate).
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
            let id = claims.first(where: { state.claims[$0] != nil }).flatMap { state.claims[$0] } ?? proposed
            for claim in claims where state.claims[claim] == nil {
                state.claims[claim] = id
                state.claimOrder.append(claim)
            }
            if state.claims.count > Self.maximumClaims {
                for old in state.claimOrder.prefix(Self.maximumClaims / 2) { state.claims[old] = nil }
                state.claimOrder.removeFirst(Self.maximumClaims / 2)
            }
            return id
        }
    }

    /// Forgets the claims of objects whose keys this commit deletes or changes: the values
    /// are free again, and must not bring the old ID back. Runs under the state lock.
    static func releaseClaims(of changes: ChangeSet, in state: inout QueueState) {
        guard !state.claims.isEmpty else { return }
        var released = Set<ObjectID>()
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
    /// property, this commit winning.
    static func mergeClaimedInserts(_ changes: ChangeSet, reader: inout RowReader) throws -> ChangeSet {
        guard !changes.upserts.isEmpty else { return changes }
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
        result.upserts = [:]
        return result
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

        // Within the commit.
        var mine: [ObjectIdentifier: [[Value]: ObjectID]] = [:]
        var checked: [ObjectIdentifier: Set<ObjectID>] = [:]
        for row in rows {
            for constraint in row.constraints {
                guard let key = constraint.key(in: row.values) else { continue }
                let slot = ObjectIdentifier(constraint)
                if let other = mine[slot]?[key], other != row.id {
                    throw violation(constraint, key, row.id, other)
                }
                mine[slot, default: [:]][key] = row.id
                checked[slot, default: []].insert(row.id)
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
                for other in try storedRows(constraint, key, reader: reader) where try conflicts(other) {
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

    /// The stored rows holding `key` (before the overlay).
    private static func storedRows(_ constraint: UniqueConstraint, _ key: [Value], reader: RowReader) throws -> [ObjectID] {
        let table = constraint.entity.table!
        var sql = "SELECT \"Z_PK\" FROM \(table.quotedName) WHERE "
            + constraint.keys.map { "\($0.quotedIdentifier) = ?" }.joined(separator: " AND ")
        if let codes = constraint.entityCodes { sql += " AND \"Z_ENT\" IN (\(codes.map(String.init).joined(separator: ", ")))" }
        var ids: [ObjectID] = []
        let root = constraint.entity.rootDescription
        try reader.session.connection.select(sql, key) { row in ids.append(ObjectID(rootEntity: root, primaryKey: row.int64(0))) }
        return ids
    }

    /// The rows queued commits insert or whose constrained values they change, by their key.
    private static func pendingRows(_ constraint: UniqueConstraint, reader: inout RowReader) throws -> [[Value]: [ObjectID]] {
        var result: [[Value]: [ObjectID]] = [:]
        for (id, entry) in reader.session.overlay.rows(of: constraint.entity.rootDescription) {
            switch entry.pending {
            case .inserted:
                break
            case .updated(_, let slots) where constraint.slots.contains(where: { slots[$0] != nil }):
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
