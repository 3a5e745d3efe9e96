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
            return try keepingReferencesWhole(try write(item.changes), queued: item.changes, sequence: item.sequence, db: db)
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
        return try keepingReferencesWhole(written, queued: changes, sequence: item.sequence, db: db)
    }

    /// `written` — `queued` as saved, or as rewritten — with what `keepReferencesWhole` changed
    /// besides, when what was saved needs the look (`ChangeSet.needsReferenceCheck`); `sequence`
    /// is the commit's.
    private func keepingReferencesWhole(_ written: WrittenItem, queued: ChangeSet, sequence: UInt64,
                                        db: any StoreConnection) throws -> WrittenItem {
        switch written {
        case .batch:
            return written
        case .rewritten(let saved, _, _):
            guard saved.needsReferenceCheck else { return written }
            return Self.adding(try keepReferencesWhole(saved, sequence: sequence, db: db), to: written, queued: queued)
        case .asQueued:
            guard queued.needsReferenceCheck else { return written }
            return Self.adding(try keepReferencesWhole(queued, sequence: sequence, db: db), to: written, queued: queued)
        }
    }

    /// Checks the references `changes` makes, and applies the delete rules of the rows it
    /// deletes to rows its context did not know of — with the writer's connection, after the
    /// commit's statements ran, in the same transaction. Returns what the rules changed
    /// besides, to be saved in the history and told to the commit's receivers. Asked only
    /// when `changes.needsReferenceCheck`.
    /// - Throws: `SaveError.relatesToDeletedObject`; `.deleteDenied` for a `.deny` rule.
    private func keepReferencesWhole(_ changes: ChangeSet, sequence: UInt64, db: some StoreConnection) throws -> ChangeSet {
        try checkReferences(changes, db: db)
        guard !changes.deletes.isEmpty else { return ChangeSet() }
        return try deleteApplyingRules(changes.deletes.map { ($0.id, $0.entity) }, alreadyDeleted: true, correcting: sequence,
                                       db: db) { owner, property, survivor in
            SaveError(.deleteDenied, """
                Cannot delete \(owner): its relationship '\(property.name)' has the delete rule .deny and holds \(survivor), \
                which another commit related to it after this context read it. Nothing of this commit is saved: \
                fetch \(owner) again, and remove or delete the related objects first.
                """, objects: [owner, survivor])
        }
    }

    /// Throws `MergeConflictError` when an object the commit deletes only through `.cascade`
    /// rules (`ChangeSet.cascaded`) is stored and no longer related to an object the commit
    /// deletes through the relationship that reached it: another commit moved it out after the
    /// context read it (`ann.pets` held Rex, and Rex is Bob's now). Deleting it would delete
    /// what is no longer the deleted object's, and the commit's other changes were made
    /// believing otherwise, so nothing of it is saved, under every merge policy. An object whose
    /// row is gone already, or that is related to any object the commit deletes through that
    /// relationship (moved from Ann to Bob, both deleted: Bob's rule takes him), is deleted as
    /// the rule says.
    ///
    /// Run before the commit's statements, which delete the rows it reads: one statement per
    /// table to lock the rows (on PostgreSQL, so that a move committed meanwhile is seen and a
    /// later one waits), and one per relationship, whatever the number of objects.
    func checkCascades(_ changes: ChangeSet, db: some StoreConnection) throws {
        var entities: [ObjectID: ResolvedEntity] = [:]
        for delete in changes.deletes { entities[delete.id] = delete.entity }
        // The relationships that reached the objects, by where they are stored (sibling
        // sub-entities may each declare a relationship of one name, stored apart), with the
        // objects the commit deletes that have them.
        var relationships: [CascadeKey: (property: Property, parents: Set<ObjectID>, children: Set<ObjectID>)] = [:]
        for (child, origins) in changes.cascaded {
            for origin in origins {
                guard let key = CascadeKey(origin.property, of: origin.parent, graph: graph) else { continue }
                relationships[key, default: (origin.property, [], [])].children.insert(child)
            }
        }
        for delete in changes.deletes {
            for property in delete.entity.properties where property.isRelationship && property.deleteRule == .cascade {
                guard let key = CascadeKey(property, of: delete.id, graph: graph), relationships[key] != nil else { continue }
                relationships[key]!.parents.insert(delete.id)
            }
        }
        var locking: [(id: ObjectID, entity: ResolvedEntity)] = []
        var locked = Set<ObjectID>()
        for (_, parents, children) in relationships.values {
            for id in parents.union(children) where locked.insert(id).inserted {
                if let entity = entities[id] { locking.append((id, entity)) }
            }
        }
        try lockForDelete(locking, db: db)

        // The children related now to an object the commit deletes, through each relationship
        // (in one order for every writer: PostgreSQL locks join pairs as it reads them).
        var related = Set<CascadeKey.Child>()
        for key in relationships.keys.sorted(by: { $0.storage < $1.storage }) {
            let (property, parents, children) = relationships[key]!
            let parentKeys = Set(parents.lazy.map(\.primaryKey))
            for (parent, child) in try pairs(property, parents: parents, children: children, db: db) where parentKeys.contains(parent) {
                related.insert(.init(key: key, child: child))
            }
        }
        var moved: [(id: ObjectID, origin: CascadeOrigin)] = []
        for delete in changes.deletes {
            guard let origins = changes.cascaded[delete.id] else { continue }
            let stillRelated = origins.contains { origin in
                CascadeKey(origin.property, of: origin.parent, graph: graph).map { related.contains(.init(key: $0, child: delete.id.primaryKey)) } ?? false
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

    /// The pairs of keys (parent, child) that `property` of `parents` relates to `children`
    /// in the database now, read with `db`: from the children's column for a to-many whose
    /// inverse holds it, from the parents' own column for a to-one, from the join table's pairs
    /// (read locked on PostgreSQL: a move of a child to another object is its pair's delete).
    private func pairs(_ property: Property, parents: Set<ObjectID>, children: Set<ObjectID>,
                       db: some StoreConnection) throws -> [(parent: Int64, child: Int64)] {
        guard let destination = property.destination, let parent = parents.first,
              let owner = graph.entity(for: parent.rootEntity)?.table else { return [] }
        func read(_ keys: Set<ObjectID>, _ sql: (String) -> String, _ pair: ([Value]) -> (Int64, Int64)?) throws -> [(parent: Int64, child: Int64)] {
            var found: [(parent: Int64, child: Int64)] = []
            try InLists.each(keys.map(\.primaryKey).sorted()) { placeholders, arguments in
                for row in try db.allRows(sql(placeholders), arguments) { if let pair = pair(row) { found.append(pair) } }
            }
            return found
        }
        switch property.storage {
        case .inverseColumn:
            guard let inverse = property.inverse else { return [] }
            return try read(children, { "SELECT \"Z_PK\", \(inverse.quotedName) FROM \(destination.table.quotedName) WHERE \"Z_PK\" IN (\($0))" }) { row in
                row[1].int64Value.flatMap { parent in row[0].int64Value.map { (parent, $0) } }
            }
        case .column:
            return try read(parents, { "SELECT \"Z_PK\", \(property.quotedName) FROM \(owner.quotedName) WHERE \"Z_PK\" IN (\($0))" }) { row in
                row[0].int64Value.flatMap { parent in row[1].int64Value.map { (parent, $0) } }
            }
        case .joinTable:
            guard let join = property.joinTable else { return [] }
            let (mine, theirs) = property.joinColumns
            return try read(parents, { "SELECT \(mine), \(theirs) FROM \(join.quotedName) WHERE \(mine) IN (\($0))\(dialect.deleteLock)" }) { row in
                row[0].int64Value.flatMap { parent in row[1].int64Value.map { (parent, $0) } }
            }
        }
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

/// A relationship that reached objects a commit deletes only through cascades, by where it is
/// stored — the column and its table, or the join table and its side — for `checkCascades`.
/// Not by name: sibling sub-entities may each declare a relationship of one name, stored apart;
/// and not by `Property`: each sub-entity has its own copy of an inherited one.
private struct CascadeKey: Hashable {
    let storage: String

    /// `property` of `owner` (an object of the entity that has it), or `nil` for a
    /// relationship without a destination.
    init?(_ property: Property, of owner: ObjectID, graph: ModelGraph) {
        guard let destination = property.destination else { return nil }
        switch property.storage {
        case .inverseColumn:
            guard let inverse = property.inverse else { return nil }
            storage = "column \(destination.table.name).\(inverse.name)"
        case .column:
            guard let table = graph.entity(for: owner.rootEntity)?.table else { return nil }
            storage = "column \(table.name).\(property.name)"
        case .joinTable:
            guard let join = property.joinTable else { return nil }
            storage = "pairs \(join.name) \(property.joinColumns.mine)"
        }
    }

    /// The key of a child related now, through the relationship `key`, to an object the
    /// commit deletes (children of one relationship share a table).
    struct Child: Hashable {
        let key: CascadeKey
        let child: Int64
    }
}
