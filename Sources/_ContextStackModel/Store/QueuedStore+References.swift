import _ContextStackCore

// No reference left pointing at a row that is gone, whatever other contexts, processes or
// machines commit meanwhile.
//
// A context checks a commit against what it read: its delete rules run over the related
// objects it knows, and the objects it relates were stored when it read them. Another commit
// can change either before this one is written — delete an object this one relates to, or
// relate an object to one this one deletes — and neither store has foreign keys to notice
// (ContextStack keeps relationships itself). So the writer looks again, inside the
// transaction that writes the commit, once the commit's statements ran:
// - every reference the commit makes must name a stored row, or the commit fails
//   (`SaveError.relatesToDeletedObject`);
// - every row the commit deletes gets its delete rules applied to the rows that still relate
//   to it, which its context did not know (`deleteApplyingRules`): through a to-one column
//   of theirs or a join pair. `.cascade` deletes them, `.nullify` clears their reference (a
//   pair goes, whatever the rule), `.deny` fails the commit.
//
// On SQLite the writer holds the file's write lock, so what it reads is exact. On PostgreSQL,
// the rows referred to are read `FOR KEY SHARE` (`SQLDialect.referenceLock`): a transaction
// deleting one of them waits until this one ends, then finds the new referrer; one that
// deleted it first makes this read wait, then find it gone. A delete's own `DELETE` takes the
// same rows' locks before its look for referrers runs, so the two always meet.

extension QueuedStore {
    /// Writes one commit the way every store's writer does, inside its transaction: under a
    /// policy that compares with the store, the policy applied again to the rows as stored now
    /// (another process, or the writer's own delete rules, may have changed them since
    /// `commit()` checked), with what it kept told to the receivers (`keptValues`); then `write`
    /// — the store's statements for the change set, and its merges of `fetchOrCreate`s into
    /// rows saved meanwhile; then the references kept whole (`keepReferencesWhole`).
    package func writeCommit(_ item: QueueItem, db: any StoreConnection,
                             write: (ChangeSet) throws -> WrittenItem) throws -> WrittenItem {
        if !item.changes.cascaded.isEmpty { try checkCascades(item.changes, db: db) }
        guard item.changes.checksStore(under: item.policy) else {
            // Most commits (`.objectTrump`): no copy of the change set, which cost save1 1,700
            // instructions a commit through this generic frame.
            return try keepingReferencesWhole(try write(item.changes), queued: item.changes, db: db)
        }
        var reader = RowReader(stored: db, graph: graph)
        let changes = try Self.resolve(item.changes, policy: item.policy, reader: &reader)
        var correction = try Self.keptValues(item.changes.updates, resolved: changes.updates, reader: &reader)
        var written = try write(changes)
        switch written {
        case .rewritten(let rewritten, let adopted, let merged):
            correction.append(adopted)
            written = .rewritten(saved: rewritten, correction: correction, merged: merged)
        case .asQueued where !correction.isEmpty:
            written = .rewritten(saved: changes, correction: correction)
        case .asQueued, .batch:
            break
        }
        return try keepingReferencesWhole(written, queued: changes, db: db)
    }

    /// `written` — `queued` as saved, or as rewritten — with what `keepReferencesWhole` changed
    /// besides, when what was saved needs the look (`ChangeSet.needsReferenceCheck`).
    private func keepingReferencesWhole(_ written: WrittenItem, queued: ChangeSet, db: any StoreConnection) throws -> WrittenItem {
        switch written {
        case .batch:
            return written
        case .rewritten(let saved, _, _):
            guard saved.needsReferenceCheck else { return written }
            return Self.adding(try keepReferencesWhole(saved, db: db), to: written, queued: queued)
        case .asQueued:
            guard queued.needsReferenceCheck else { return written }
            return Self.adding(try keepReferencesWhole(queued, db: db), to: written, queued: queued)
        }
    }

    /// Checks the references `changes` makes, and applies the delete rules of the rows it
    /// deletes to rows its context did not know of — with the writer's connection, after the
    /// commit's statements ran, in the same transaction. Returns what the rules changed
    /// besides, to be saved in the history and told to the commit's receivers. Asked only
    /// when `changes.needsReferenceCheck`.
    /// - Throws: `SaveError.relatesToDeletedObject`; `.deleteDenied` for a `.deny` rule.
    private func keepReferencesWhole(_ changes: ChangeSet, db: some StoreConnection) throws -> ChangeSet {
        try checkReferences(changes, db: db)
        guard !changes.deletes.isEmpty else { return ChangeSet() }
        return try deleteApplyingRules(changes.deletes.map { ($0.id, $0.entity) }, alreadyDeleted: true, db: db) { owner, property, survivor in
            SaveError(.deleteDenied, """
                Cannot delete \(owner): its relationship '\(property.name)' has the delete rule .deny and holds \(survivor), \
                which another commit related to it after this context read it. Nothing of this commit is saved: \
                fetch \(owner) again, and remove or delete the related objects first.
                """, objects: [owner, survivor])
        }
    }

    /// Throws `MergeConflictError` when an object the commit deletes only through `.cascade`
    /// rules (`ChangeSet.cascaded`) is stored and no longer related to any of the objects
    /// whose rules reached it: another commit moved it out of the relationship after the
    /// context read it (`ann.pets` held Rex, and Rex is Bob's now). Deleting it would delete
    /// what is no longer the deleted object's, and the commit's other changes were made
    /// believing otherwise, so nothing of it is saved, under every merge policy. An object
    /// whose row is gone already, or that is still related, is deleted as the rule says. Run
    /// before the commit's statements, which delete the rows it reads; on PostgreSQL with the
    /// rows locked first, so that a move committed meanwhile is seen and a later one waits.
    func checkCascades(_ changes: ChangeSet, db: some StoreConnection) throws {
        var entities: [ObjectID: ResolvedEntity] = [:]
        for delete in changes.deletes { entities[delete.id] = delete.entity }
        var locking: [(id: ObjectID, entity: ResolvedEntity)] = []
        var seen = Set<ObjectID>()
        for (id, origins) in changes.cascaded {
            for id in [id] + origins.map(\.parent) where seen.insert(id).inserted {
                if let entity = entities[id] { locking.append((id, entity)) }
            }
        }
        try lockForDelete(locking, db: db)
        // What each (parent, relationship) relates now, read once.
        var relatedNow: [CascadeKey: Set<ObjectID>] = [:]
        var moved: [(id: ObjectID, origin: CascadeOrigin)] = []
        for delete in changes.deletes {
            guard let origins = changes.cascaded[delete.id] else { continue }
            var stillRelated = false
            for origin in origins {
                let key = CascadeKey(parent: origin.parent, slot: origin.property.slot)
                if relatedNow[key] == nil {
                    guard let table = entities[origin.parent]?.table ?? graph.entity(for: origin.parent.rootEntity)?.table else { continue }
                    relatedNow[key] = Set(try related(origin.property, of: [origin.parent.primaryKey], in: table, db: db).map(\.id))
                }
                if relatedNow[key]!.contains(delete.id) {
                    stillRelated = true
                    break
                }
            }
            if !stillRelated { moved.append((delete.id, origins[0])) }
        }
        guard !moved.isEmpty else { return }
        var reader = RowReader(stored: db, graph: graph)
        var conflicts: [MergeConflictError.Conflict] = []
        for (id, origin) in moved {
            guard let row = try reader.row(id) else { continue }
            // The object's side of the relationship, when it has one: its value now.
            let inverse = origin.property.inverse
            let stored = inverse.map { $0.isToOne ? row.values[$0.slot] : Value.null } ?? .null
            conflicts.append(.init(objectID: id, key: inverse?.name ?? "<\(origin.property.name) of \(origin.parent)>",
                                   snapshot: .integer(origin.parent.primaryKey), stored: stored, ours: .null))
        }
        guard !conflicts.isEmpty else { return }
        throw MergeConflictError(conflicts: conflicts, explanation: """
            a .cascade rule of an object it deletes reached objects another commit has since moved out of that relationship, \
            and the commit would delete them; nothing of it is saved, whatever the merge policy. Fetch the objects again and \
            delete once the context sees the move
            """)
    }

    /// Throws `SaveError.relatesToDeletedObject` for the first reference `changes` makes to a
    /// row that is not stored once it is applied: a to-one it sets (one its context started
    /// from is not new — a `.noAction` rule may have left it dangling by design), either end of
    /// a join pair it adds. Rows the commit inserts are stored; nothing is read for them.
    private func checkReferences(_ changes: ChangeSet, db: some StoreConnection) throws {
        var targets: [String: (table: Table, keys: [Int64: (target: ObjectID, referrer: ObjectID)])] = [:]
        var inserted: Set<ObjectID>?
        func note(_ target: ObjectID, in table: Table, from referrer: ObjectID) {
            if inserted == nil { inserted = Set(changes.inserts.lazy.map(\.id)) }
            guard !inserted!.contains(target) else { return }
            targets[table.name, default: (table, [:])].keys[target.primaryKey] = (target, referrer)
        }
        // By index: iterating copies each element, which for an import of many rows without
        // a to-one was all the work.
        for index in changes.inserts.indices where !changes.inserts[index].row.entity.toOneSlots.isEmpty {
            let (id, row) = changes.inserts[index]
            for slot in row.entity.toOneSlots {
                let property = row.entity.properties[slot]
                if let target = property.destinationID(of: row.values[slot]) { note(target, in: property.destination!.table, from: id) }
            }
        }
        for index in changes.updates.indices where !changes.updates[index].entity.toOneSlots.isEmpty {
            let update = changes.updates[index]
            for (slot, value) in zip(update.slots, update.values) {
                let property = update.entity.properties[slot]
                guard let target = property.destinationID(of: value) else { continue }
                if slot < update.snapshot.count && update.snapshot[slot].isIdentical(to: value) { continue }
                note(target, in: property.destination!.table, from: update.id)
            }
        }
        for link in changes.links where link.present {
            guard let ends = changes.linkEnds[link.key],
                  let source = graph.entity(for: ends.source.rootEntity), let target = graph.entity(for: ends.target.rootEntity) else { continue }
            note(ends.source, in: source.table, from: ends.target)
            note(ends.target, in: target.table, from: ends.source)
        }
        // Table by table in name order, each in key order: PostgreSQL's locks are taken in the
        // order every writer keeps (`LockSet`).
        for name in targets.keys.sorted() {
            let (table, keys) = targets[name]!
            let found = try storedKeys(Array(keys.keys), of: table, lock: dialect.referenceLock, db: db)
            if let missing = keys.keys.sorted().first(where: { !found.contains($0) }), let (target, referrer) = keys[missing] {
                throw SaveError.relatesToDeletedObject(referrer, target)
            }
        }
    }

    /// `written` with what the delete rules changed besides (`keepReferencesWhole`): saved
    /// with the commit, and told to its receivers.
    private static func adding(_ ruled: ChangeSet, to written: WrittenItem, queued: ChangeSet) -> WrittenItem {
        guard !ruled.isEmpty else { return written }
        switch written {
        case .asQueued:
            var saved = queued
            saved.append(ruled)
            return .rewritten(saved: saved, correction: ruled)
        case .rewritten(var saved, var correction, let merged):
            saved.append(ruled)
            correction.append(ruled)
            return .rewritten(saved: saved, correction: correction, merged: merged)
        case .batch:
            return written
        }
    }
}

extension ChangeSet {
    /// Whether the writer must look at the commit once written (`QueuedStore.keepReferencesWhole`):
    /// it deletes, or it can make a reference. Most commits do neither, and the writer then
    /// skips even the call: in save1 the call, an empty change set made and the written item
    /// copied cost about 1,400 instructions a commit.
    var needsReferenceCheck: Bool { !deletes.isEmpty || setsReferences }

    /// Whether the commit adds a pair, or inserts or updates a row of an entity with to-ones:
    /// whether it can make a reference at all.
    var setsReferences: Bool {
        if links.contains(where: \.present) { return true }
        // By index, reading only the entity: iterating copies each element.
        for index in inserts.indices where !inserts[index].row.entity.toOneSlots.isEmpty { return true }
        for index in updates.indices where !updates[index].entity.toOneSlots.isEmpty { return true }
        return false
    }
}

/// A deleted object and one of its relationships, whose related objects `checkCascades` read.
private struct CascadeKey: Hashable {
    let parent: ObjectID
    let slot: Int
}
