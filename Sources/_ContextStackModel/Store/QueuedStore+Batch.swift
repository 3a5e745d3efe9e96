import _ContextStackCore

extension QueuedStore {
    /// Runs a batch operation in the writer's order and waits until it is written.
    ///
    /// - Parameter onVisible: runs under the store's lock once the operation is written, with
    ///   the commit it amounts to (for main contexts and commit observers).
    /// - Throws: what the operation threw (`SaveError` for a `.deny` rule or a uniqueness
    ///   constraint, the database's error); nothing of it is stored then.
    package func runBatch(_ operation: BatchOperation, info: CommitInfo, onVisible: @escaping @Sendable (ChangeSet) -> Void) throws -> BatchResult {
        var carrier = ChangeSet()
        carrier.info = info
        let item = QueueItem(changes: carrier, claimed: true, afterWrite: onVisible, batch: operation)
        let (submission, start) = state.withLock { state in Self.append(item, to: &state, announce: { _ in }) }
        if start { drain(until: submission.sequence) }
        let waiter = FlushWaiter(sequence: submission.sequence)
        register(waiter, upTo: submission.sequence)
        try waiter.wait()
        return state.withLock { $0.batchResults.removeValue(forKey: submission.sequence) } ?? BatchResult()
    }

    /// Runs a batch operation with the writer connection, inside the writer's transaction.
    package func execute(_ operation: BatchOperation, db: some StoreConnection) throws -> BatchResult {
        switch operation {
        case .update(let entity, let condition, let assignments):
            return try executeUpdate(entity, condition, assignments, db: db)
        case .delete(let entity, let condition):
            return try executeDelete(entity, condition, db: db)
        }
    }

    /// The rows of `entity` that `condition` matches, with their entities, locked with `lock`
    /// where the store has row locks (`SQLDialect.deleteLock`, `updateLock`): the operation then
    /// changes exactly these rows, and reports exactly them.
    ///
    /// On PostgreSQL another process can commit between two statements of the writer's
    /// transaction. So the rows are not matched again by the statement that changes them —
    /// that one would see a row inserted or changed meanwhile that the operation did not
    /// report — but named by key. And they are locked as they are matched, in key order (the
    /// order every writer locks in): a row another transaction is changing is waited for and
    /// its condition evaluated again on what that transaction committed, so a row that no
    /// longer matches is left alone (deleting it would throw away the other's change).
    private func matchingRows(_ entity: ResolvedEntity, _ condition: Condition?, lock: String, db: some StoreConnection) throws
        -> [(id: ObjectID, entity: ResolvedEntity)] {
        let query = try CompiledQuery(entity: entity, condition: condition, orderBy: nil, dialect: dialect)
        let alias = query.tableAliases[""]!
        let matching = query.fromWhere()
        let locking = lock.isEmpty ? "" : " ORDER BY \(alias).\"Z_PK\"\(lock) OF \(alias)"
        return try typedRows(db, "SELECT \(alias).\"Z_PK\"\(entity.table.hasEntityColumn ? ", \(alias).\"Z_ENT\"" : "") \(matching.text)\(locking)",
                             matching.arguments, root: entity)
    }

    // MARK: - Update

    private func executeUpdate(_ entity: ResolvedEntity, _ condition: Condition?, _ assignments: [(slot: Int, value: Value)],
                               db: some StoreConnection) throws -> BatchResult {
        let rows = try matchingRows(entity, condition, lock: dialect.updateLock, db: db)
        var result = BatchResult(matched: rows.count)
        guard !rows.isEmpty, !assignments.isEmpty else { return result }
        let slots = assignments.map(\.slot)
        let values = assignments.map(\.value)
        result.changes.updates = rows.map { .init(id: $0.id, entity: $0.entity, slots: slots, values: values) }
        try captureBeforeImages(result.changes, db: db)
        let set = (assignments.map { "\(entity.properties[$0.slot].name.quotedIdentifier) = ?" } + dialect.rowVersionAssignments)
            .joined(separator: ", ")
        try InLists.each(rows.map(\.id.primaryKey)) { placeholders, keys in
            try db.execute("UPDATE \(entity.table.quotedName) SET \(set) WHERE \"Z_PK\" IN (\(placeholders))", values + keys)
        }
        return result
    }

    // MARK: - Delete

    private func executeDelete(_ entity: ResolvedEntity, _ condition: Condition?, db: some StoreConnection) throws -> BatchResult {
        let matched = try matchingRows(entity, condition, lock: dialect.deleteLock, db: db)
        var result = BatchResult(matched: matched.count)
        guard !matched.isEmpty else { return result }
        result.changes = try deleteApplyingRules(matched, db: db) { id, property, survivor in
            SaveError(.deleteDenied, "batchDelete(\(entity.name).self, …) cannot delete \(id): its relationship '\(property.name)' has the delete rule .deny and still holds \(survivor). Nothing was deleted; remove or delete the related objects first.", objects: [id, survivor])
        }
        return result
    }

    /// Deletes `rows` and everything their delete rules reach in the store, applying the rules
    /// to what is stored: `.cascade` deletes, `.nullify` (and `.cascade` for what it did not
    /// delete) lets go, `.deny` throws `denied(owner, relationship, survivor)` while a related
    /// object survives; join pairs of deleted rows go. Returns the commit it amounts to.
    ///
    /// With `alreadyDeleted`, a commit deleted `rows` a moment ago and its context ran their
    /// rules over what it knew: only what still relates to them is left to handle — rows whose
    /// to-one column points at them, their join pairs (those the context removed are gone) —
    /// and the commit returned holds what was done to those alone. Their own to-ones went with
    /// their rows. `correcting` is then that commit's sequence: views that showed it hear what
    /// the rules did (`QueuedStore.capture`).
    func deleteApplyingRules(_ rows: [(id: ObjectID, entity: ResolvedEntity)], alreadyDeleted: Bool = false,
                             correcting sequence: UInt64? = nil, db: some StoreConnection,
                             denied: (_ owner: ObjectID, _ property: Property, _ survivor: ObjectID) -> SaveError) throws -> ChangeSet {
        // Everything the delete reaches through `.cascade` rules.
        var deleted: [ObjectID: ResolvedEntity] = [:]
        var order: [(id: ObjectID, entity: ResolvedEntity)] = []
        var frontier = rows
        for row in rows { deleted[row.id] = row.entity }
        let gone = alreadyDeleted ? Set(rows.map(\.id)) : []
        // A row deleted already has no columns left to follow; what points at it through a
        // column of its own (a to-many's members, a one-to-one's other side) is still found.
        func reaches(_ property: Property, from keysGone: Bool) -> Bool {
            !keysGone || property.storage != .column || property.inverse?.isToOne == true
        }
        while !frontier.isEmpty {
            try lockForDelete(frontier.filter { !gone.contains($0.id) }, db: db)
            var next: [(id: ObjectID, entity: ResolvedEntity)] = []
            for (member, keys, keysGone) in Self.grouped(frontier, gone: gone) {
                for property in member.properties where property.isRelationship && property.deleteRule == .cascade && reaches(property, from: keysGone) {
                    for row in try related(property, of: keys, in: member.table, gone: keysGone, db: db) where deleted[row.id] == nil {
                        deleted[row.id] = row.entity
                        next.append(row)
                    }
                }
            }
            order += frontier
            frontier = next
        }

        // `.deny` refuses while a related object survives the delete.
        for (member, keys, keysGone) in Self.grouped(order, gone: gone) {
            for property in member.properties where property.isRelationship && property.deleteRule == .deny && reaches(property, from: keysGone) {
                if let survivor = try related(property, of: keys, in: member.table, gone: keysGone, db: db).first(where: { deleted[$0.id] == nil }) {
                    let owner = try ownerKey(of: survivor.id, through: property, among: keys, in: member.table, gone: keysGone, db: db)
                    throw denied(ObjectID(rootEntity: member.rootDescription, primaryKey: owner ?? keys[0]), property, survivor.id)
                }
            }
        }

        // Survivors that point at deleted objects let go (`.nullify`, and `.cascade` for what
        // it did not delete); join rows of deleted objects go. Both are read locked (on
        // PostgreSQL): a row another transaction is changing is read again once it committed,
        // and left alone if it no longer points here — its new value is not overwritten.
        var changes = ChangeSet()
        let lock = dialect.deleteLock
        var removedLinks = Set<LinkKey>()
        var nulled: [(table: Table, column: String, keys: [Int64])] = []
        // The join tables whose pairs go, by the column that holds the deleted rows' keys.
        var unpaired: [(join: JoinTable, column: String, keys: [Int64])] = []
        for (member, keys, keysGone) in Self.grouped(order, gone: gone) {
            for property in member.properties where property.isRelationship && reaches(property, from: keysGone) {
                if property.storage == .joinTable, let join = property.joinTable, let destination = property.destination {
                    let (mine, theirs) = property.joinColumns
                    unpaired.append((join, mine, keys))
                    for pair in try chunkedRows(db, keys, { "SELECT \(mine), \(theirs) FROM \(join.quotedName) WHERE \(mine) IN (\($0))\(lock)" }) {
                        guard let me = pair[0].int64Value, let other = pair[1].int64Value else { continue }
                        let key = property.linkKey(join, owner: me, member: other)
                        guard removedLinks.insert(key).inserted else { continue }
                        let mineID = ObjectID(rootEntity: member.rootDescription, primaryKey: me)
                        let otherID = ObjectID(rootEntity: destination.rootDescription, primaryKey: other)
                        changes.links.append((key, false))
                        var ends = property.linkEnds(owner: mineID, member: otherID)
                        // A side the commit deleted was reported deleted by it, not changed.
                        if gone.contains(ends.source) { ends.sourceKey = nil }
                        if gone.contains(ends.target) { ends.targetKey = nil }
                        changes.linkEnds[key] = ends
                    }
                    continue
                }
                guard property.deleteRule == .nullify || property.deleteRule == .cascade,
                      let inverse = property.inverse, inverse.isToOne, let destination = property.destination else { continue }
                let table = destination.table!
                let pointing = try chunkedRows(db, keys, {
                    "SELECT \"Z_PK\"\(table.hasEntityColumn ? ", \"Z_ENT\"" : "") FROM \(table.quotedName) WHERE \(inverse.name.quotedIdentifier) IN (\($0))\(dialect.updateLock)"
                })
                var survivors: [Int64] = []
                for row in decode(pointing, root: destination) where deleted[row.id] == nil && destination.includes(row.entity) {
                    changes.updates.append(.init(id: row.id, entity: row.entity, slots: [inverse.slot], values: [.null]))
                    survivors.append(row.id.primaryKey)
                }
                if !survivors.isEmpty { nulled.append((table, inverse.name, survivors)) }
            }
        }
        let deleting = alreadyDeleted ? order.filter { !gone.contains($0.id) } : order
        changes.deletes = deleting.map { ($0.id, $0.entity) }
        try captureBeforeImages(changes, correcting: sequence, db: db)

        for (table, column, keys) in nulled {
            try InLists.each(keys) { placeholders, arguments in
                try db.execute("UPDATE \(table.quotedName) SET \(([column.quotedIdentifier + " = NULL"] + dialect.rowVersionAssignments).joined(separator: ", ")) WHERE \"Z_PK\" IN (\(placeholders))", arguments)
            }
        }
        // A statement per list of keys, not per pair: a deleted tag with a thousand articles
        // was a thousand statements (round trips on PostgreSQL).
        for (join, column, keys) in unpaired {
            try InLists.each(keys) { placeholders, arguments in
                try db.execute("DELETE FROM \(join.quotedName) WHERE \(column) IN (\(placeholders))", arguments)
            }
        }
        let byTable = Dictionary(grouping: deleting, by: { ObjectIdentifier($0.id.rootEntity) })
        for rows in byTable.values {
            let table = rows[0].entity.table!
            try InLists.each(rows.map(\.id.primaryKey)) { placeholders, arguments in
                try db.execute("DELETE FROM \(table.quotedName) WHERE \"Z_PK\" IN (\(placeholders))", arguments)
            }
        }
        return changes
    }

    /// Locks `rows`, about to be deleted, before what relates to them is looked up, where the
    /// store has such locks (`SQLDialect.deleteLock`): a transaction of another process that
    /// is relating an object to one of them commits first, and the look finds its reference;
    /// one that comes later waits, and finds the row gone (`keepReferencesWhole`). A table at
    /// a time in name order, each in key order.
    func lockForDelete(_ rows: [(id: ObjectID, entity: ResolvedEntity)], db: some StoreConnection) throws {
        guard !dialect.deleteLock.isEmpty, !rows.isEmpty else { return }
        var tables: [String: (table: Table, keys: [Int64])] = [:]
        for row in rows { tables[row.entity.table.name, default: (row.entity.table, [])].keys.append(row.id.primaryKey) }
        for name in tables.keys.sorted() {
            _ = try storedKeys(tables[name]!.keys, of: tables[name]!.table, lock: dialect.deleteLock, db: db)
        }
    }

    /// Which of `ids` have a row in the database, read with `db`.
    package func storedObjects(_ ids: [ObjectID], db: some StoreConnection) throws -> Set<ObjectID> {
        var found = Set<ObjectID>()
        for (_, ids) in Dictionary(grouping: ids, by: { ObjectIdentifier($0.rootEntity) }) {
            guard let table = graph.entity(for: ids[0].rootEntity)?.table else { continue }
            let keys = try storedKeys(ids.map(\.primaryKey), of: table, lock: "", db: db)
            found.formUnion(ids.filter { keys.contains($0.primaryKey) })
        }
        return found
    }

    /// Which of `keys` are rows of `table`, read in key order with `lock` after the statement
    /// (a row lock on PostgreSQL, taken in the order every writer keeps).
    func storedKeys(_ keys: [Int64], of table: Table, lock: String, db: some StoreConnection) throws -> Set<Int64> {
        var found = Set<Int64>()
        try InLists.each(keys.sorted()) { placeholders, arguments in
            for row in try db.allRows("SELECT \"Z_PK\" FROM \(table.quotedName) WHERE \"Z_PK\" IN (\(placeholders)) ORDER BY \"Z_PK\"\(lock)", arguments) {
                if let key = row[0].int64Value { found.insert(key) }
            }
        }
        return found
    }

    /// The objects `property` of the objects with `keys` relates to, with their entities. Of
    /// rows deleted already (`gone`), a one-to-one's other side is found through its own
    /// column. Rows found through their own column or a join pair are read locked (on
    /// PostgreSQL), so that a row another transaction moves elsewhere meanwhile is not taken.
    private func related(_ property: Property, of keys: [Int64], in owner: Table, gone: Bool = false,
                         db: some StoreConnection) throws -> [(id: ObjectID, entity: ResolvedEntity)] {
        guard let destination = property.destination else { return [] }
        let lock = dialect.deleteLock
        var targets: [Int64] = []
        switch property.storage {
        case .column where gone:
            guard let inverse = property.inverse, inverse.isToOne else { return [] }
            targets = try chunkedRows(db, keys, {
                "SELECT \"Z_PK\" FROM \(destination.table.quotedName) WHERE \(inverse.name.quotedIdentifier) IN (\($0))\(lock)"
            }).compactMap { $0[0].int64Value }
        case .column:
            targets = try chunkedRows(db, keys, {
                "SELECT \(property.name.quotedIdentifier) FROM \(owner.quotedName) WHERE \"Z_PK\" IN (\($0)) AND \(property.name.quotedIdentifier) IS NOT NULL"
            }).compactMap { $0[0].int64Value }
        case .inverseColumn:
            guard let inverse = property.inverse else { return [] }
            targets = try chunkedRows(db, keys, {
                "SELECT \"Z_PK\" FROM \(destination.table.quotedName) WHERE \(inverse.name.quotedIdentifier) IN (\($0))\(lock)"
            }).compactMap { $0[0].int64Value }
        case .joinTable:
            guard let join = property.joinTable else { return [] }
            let (mine, theirs) = property.joinColumns
            targets = try chunkedRows(db, keys, { "SELECT \(theirs) FROM \(join.quotedName) WHERE \(mine) IN (\($0))\(lock)" })
                .compactMap { $0[0].int64Value }
        }
        guard !targets.isEmpty else { return [] }
        let table = destination.table!
        let rows = try chunkedRows(db, Array(Set(targets)), {
            "SELECT \"Z_PK\"\(table.hasEntityColumn ? ", \"Z_ENT\"" : "") FROM \(table.quotedName) WHERE \"Z_PK\" IN (\($0))"
        })
        return decode(rows, root: destination).filter { destination.includes($0.entity) }
    }

    /// Which of `keys` relates to `target` through `property` (for the `.deny` message).
    private func ownerKey(of target: ObjectID, through property: Property, among keys: [Int64], in owner: Table,
                          gone: Bool, db: some StoreConnection) throws -> Int64? {
        for key in keys where try related(property, of: [key], in: owner, gone: gone, db: db).contains(where: { $0.id == target }) { return key }
        return nil
    }

    // MARK: - Pinned views

    /// Records the rows a batch operation is about to change for every pinned view, as a
    /// commit does when it is submitted (the batch learns its rows only now).
    private func captureBeforeImages(_ changes: ChangeSet, correcting sequence: UInt64? = nil, db: some StoreConnection) throws {
        guard state.withLock({ !$0.pins.isEmpty }) else { return }
        try state.withLock { state in
            var reader = RowReader(stored: db, graph: graph)
            try Self.capture(changes, into: &state.pins, correcting: sequence, reader: &reader)
        }
    }

    // MARK: - SQL helpers

    /// Rows of `SELECT "Z_PK"[, "Z_ENT"] …` as IDs with their entities.
    private func typedRows(_ db: some StoreConnection, _ sql: String, _ arguments: [Value], root: ResolvedEntity) throws -> [(id: ObjectID, entity: ResolvedEntity)] {
        decode(try db.allRows(sql, arguments), root: root)
    }

    private func decode(_ rows: [[Value]], root: ResolvedEntity) -> [(id: ObjectID, entity: ResolvedEntity)] {
        guard let top = graph.entity(for: root.rootDescription) else { return [] }
        return rows.compactMap { row in
            guard let key = row[0].int64Value else { return nil }
            var entity = top
            if top.table.hasEntityColumn {
                guard let member = top.family.first(where: { $0.entityCode == row[1].int64Value }) else { return nil }
                entity = member
            }
            return (ObjectID(rootEntity: top.rootDescription, primaryKey: key), entity)
        }
    }

    /// `rows` by entity, in order of first appearance, the keys of each; with `gone`, the rows
    /// in it grouped apart (`keysGone`).
    private static func grouped(_ rows: [(id: ObjectID, entity: ResolvedEntity)],
                                gone: Set<ObjectID> = []) -> [(ResolvedEntity, [Int64], keysGone: Bool)] {
        var groups: [RowGroup: (ResolvedEntity, [Int64], keysGone: Bool)] = [:]
        var order: [RowGroup] = []
        for row in rows {
            let key = RowGroup(entity: ObjectIdentifier(row.entity), gone: !gone.isEmpty && gone.contains(row.id))
            if groups[key] == nil { order.append(key); groups[key] = (row.entity, [], key.gone) }
            groups[key]!.1.append(row.id.primaryKey)
        }
        return order.map { groups[$0]! }
    }

    /// Every row of `sql(placeholders)` over `keys`, in `IN` lists (`InLists.each`).
    private func chunkedRows(_ db: some StoreConnection, _ keys: [Int64], _ sql: (String) -> String) throws -> [[Value]] {
        var rows: [[Value]] = []
        try InLists.each(keys) { placeholders, arguments in rows += try db.allRows(sql(placeholders), arguments) }
        return rows
    }
}

/// The rows of one entity, deleted already or not (`QueuedStore.grouped`).
private struct RowGroup: Hashable {
    let entity: ObjectIdentifier
    let gone: Bool
}
