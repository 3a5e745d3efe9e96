import _ContextStackCore

/// Reads rows for one fetch, inside one read session: from the store, overlaid with the
/// writer's pending commits, the before-images of a pinned view (for a main context that does
/// not merge), and the reading context's own changes, with a per-read cache.
package struct RowReader {
    package let session: ReadSession
    /// The reading context, whose own changes come first; `nil` for the store itself.
    let context: ContextCore?
    private var cache: [ObjectID: ObjectRow?] = [:]
    /// Stored rows read ahead in bulk by `rows(for:)`, before the overlay and the context apply.
    private var stored: [ObjectID: ObjectRow?] = [:]
    /// The stored rows holding a uniqueness constraint's values, by constraint and values, as
    /// `QueuedStore.storedRows` read them, when the reader keeps them (not `nil`): a commit
    /// handed over looks its claimed inserts' values up when they are merged
    /// (`adoptSavedRows`) and again when uniqueness is checked, in one view of the store.
    var storedHolders: [UniqueKey: [ObjectID]]?

    /// A uniqueness constraint's values.
    struct UniqueKey: Hashable {
        let constraint: ObjectIdentifier
        let values: [Value]
    }

    package init(session: ReadSession, context: ContextCore?) {
        self.session = session
        self.context = context
    }

    /// A reader of what `connection` sees stored, with no overlay and no context: a writer
    /// reading inside its own transaction.
    package init(stored connection: any QueryConnection, graph: ModelGraph) {
        self.init(session: ReadSession(graph: graph, connection: connection, overlay: Overlay()), context: nil)
    }

    private var graph: ModelGraph { session.graph }

    /// `t0."Z_PK", [t0."Z_ENT",] t0."a", t0."b", …` for a table; with `columns`, only those of
    /// the table's columns (by index), and none for `[]`.
    func selectColumns(_ table: Table, alias: String, columns wanted: [Int]? = nil) -> String {
        if wanted == nil && alias == "t0" { return table.wholeRowSelectList }
        var columns = ["\(alias).\"Z_PK\""]
        if table.hasEntityColumn { columns.append("\(alias).\"Z_ENT\"") }
        for index in wanted ?? Array(table.columns.indices) {
            columns.append("\(alias).\(table.columns[index].name.quotedIdentifier)")
        }
        return columns.joined(separator: ", ")
    }

    /// Runs a SELECT made with `selectColumns` (and the same `columns`) and decodes its rows.
    /// With `columns`, a row's other slots are `.null`, and with `[]` its values are empty.
    func rows(_ sql: CompiledQuery.SQL, table: Table, columns: [Int]? = nil) throws -> [(id: ObjectID, row: ObjectRow)] {
        var result: [(id: ObjectID, row: ObjectRow)] = []
        try eachRow(sql, table: table, columns: columns, expecting: { result.reserveCapacity($0) }) { id, row in
            result.append((id, row))
        }
        return result
    }

    /// `rows`, handing each decoded row to `body` as it is read instead of collecting them;
    /// `expecting` learns the number of rows first when the store knows it.
    func eachRow(_ sql: CompiledQuery.SQL, table: Table, columns: [Int]? = nil, expecting: (Int) -> Void,
                 _ body: (ObjectID, consuming ObjectRow) throws -> Void) throws {
        guard let root = graph.entity(named: table.name) else { return }
        let identify = RowIdentifier(root)
        try session.connection.select(sql.text, sql.arguments, expecting: expecting) { row in
            if let (id, decoded) = decode(row, identify, columns: columns) { try body(id, decoded) }
        }
    }

    private func decode(_ row: any QueryRow, _ identify: RowIdentifier, columns: [Int]?) -> (id: ObjectID, row: ObjectRow)? {
        guard let (id, member) = identify(row) else { return nil }
        let entity = member.takeUnretainedValue()
        guard let columns else {
            var values = ContiguousArray<Value>.nulls(entity.properties.count)
            row.read(entity.rowLayout, into: &values)
            return (id, ObjectRow(entity: entity, values: values))
        }
        guard !columns.isEmpty else { return (id, ObjectRow(entity: entity, values: [])) }
        let base = identify.family == nil ? 1 : 2
        var values = ContiguousArray<Value>.nulls(entity.properties.count)
        for slot in entity.storedSlots {
            if let position = columns.firstIndex(of: entity.properties[slot].column) {
                values[slot] = row.value(base + position)
            }
        }
        return (id, ObjectRow(entity: entity, values: values))
    }

    /// The rows of `ids` as the reading context sees them (absent: missing or deleted), with
    /// the stored ones read in a few statements instead of one each.
    mutating func rows(for ids: [ObjectID]) throws -> [ObjectID: ObjectRow] {
        var needed: [ObjectIdentifier: (root: ResolvedEntity, keys: [Int64])] = [:]
        for id in ids where cache[id] == nil && stored[id] == nil && context?.changed[id] == nil {
            guard let root = graph.entity(for: id.rootEntity) else { continue }
            needed[ObjectIdentifier(id.rootEntity), default: (root, [])].keys.append(id.primaryKey)
        }
        for (root, keys) in needed.values {
            let table = root.table!
            for key in keys { stored[ObjectID(rootEntity: root.description_, primaryKey: key)] = .some(nil) }
            let identify = RowIdentifier(root)
            try eachRow(keys: keys, sql: { "SELECT \(selectColumns(table, alias: "t0")) FROM \(table.quotedName) AS t0 WHERE t0.\"Z_PK\" IN (\($0))" }) { row in
                if let (id, decoded) = decode(row, identify, columns: nil) { stored[id] = .some(decoded) }
            }
        }
        var result: [ObjectID: ObjectRow] = [:]
        for id in ids {
            if let row = try row(id) { result[id] = row }
        }
        return result
    }

    /// Whether every row of `root`'s table reads as SQL returns it: nothing of it is pending in
    /// the overlay, no view is pinned, and the reading context has no changes.
    func seesStoredRows(of root: EntityDescription) -> Bool {
        session.overlay.rows(of: root).isEmpty && (session.pinned?.isEmpty ?? true) && (context?.changed.isEmpty ?? true)
    }

    /// The stored rows of `keys` (ascending, primary keys of `root`'s family), in key order,
    /// decoded whole: for a reader that `seesStoredRows(of:)` the family.
    func eachStoredRow(of root: ResolvedEntity, ascendingKeys keys: [Int64], _ body: (ObjectID, consuming ObjectRow) throws -> Void) throws {
        let table = root.table!
        let identify = RowIdentifier(root)
        try eachRow(keys: keys, sql: { "\(table.selectWholeRowsFrom) WHERE t0.\"Z_PK\" IN (\($0)) ORDER BY t0.\"Z_PK\"" }) { row in
            if let (id, decoded) = decode(row, identify, columns: nil) { try body(id, decoded) }
        }
    }

    /// The row of `id` as the reading context sees it; `nil` when it does not exist or is deleted.
    package mutating func row(_ id: ObjectID) throws -> ObjectRow? {
        if let cached = cache[id] { return cached }
        let row = try uncachedRow(id)
        cache[id] = .some(row)
        return row
    }

    private mutating func uncachedRow(_ id: ObjectID) throws -> ObjectRow? {
        if let object = context?.changed[id] {
            return object.state == .deleted ? nil : ObjectRow(entity: object.entity, values: object.values)
        }
        switch session.pinned?.rows[id] {
        case .absent?:
            return nil
        case .row(let row)?:
            return row
        case .slots(_, let slots)?:
            guard var row = try currentRow(id) else { return nil }
            for (slot, value) in slots where slot < row.values.count { row.values[slot] = value }
            return row
        case nil:
            return try currentRow(id)
        }
    }

    /// The row as committed now: the overlay over the store.
    private mutating func currentRow(_ id: ObjectID) throws -> ObjectRow? {
        switch session.overlay.entry(for: id)?.pending {
        case .inserted(let row)?:
            return row
        case .deleted?:
            return nil
        case .updated(_, let slots, let values)?:
            // The stored row is kept: a pinned view's capture asks for the values under the
            // overlay next (`storedValues(of:underOverlay:)`).
            let read = try storedRow(id)
            stored[id] = .some(read)
            guard var row = read else { return nil }
            for (slot, value) in zip(slots, values) where slot < row.values.count { row.values[slot] = value }
            return row
        case nil:
            return try storedRow(id)
        }
    }

    private func storedRow(_ id: ObjectID) throws -> ObjectRow? {
        if let read = stored[id] { return read }
        guard let root = graph.entity(for: id.rootEntity) else { return nil }
        let table = root.table!
        let identify = RowIdentifier(root)
        var found: ObjectRow?
        try session.connection.select(table.selectByKeySQL, [.integer(id.primaryKey)]) { row in
            found = decode(row, identify, columns: nil)?.row
        }
        return found
    }

    /// Objects of `root`'s table whose rows, as this reader sees them, may differ from what
    /// SQL returns: pending in the overlay, pinned, or changed in the context.
    package func pendingIDs(of root: EntityDescription) -> Set<ObjectID> {
        var ids = Set(session.overlay.rows(of: root).keys)
        if let pinned = session.pinned {
            for id in pinned.rows.keys where id.rootEntity === root { ids.insert(id) }
        }
        if let context {
            for id in context.changed.keys where id.rootEntity === root { ids.insert(id) }
        }
        return ids
    }

    private func pendingKeys(of root: EntityDescription) -> Set<Int64> {
        Set(pendingIDs(of: root).map(\.primaryKey))
    }

    /// Objects of `entity` whose values along `chain` (to-one hops) may differ from what the
    /// store says, because an object along the chain has pending changes. Their predicate is
    /// evaluated in memory instead of trusting SQL.
    ///
    /// `changed` adds keys, by root entity, to those counted as pending (a commit's objects,
    /// for live results).
    package func referencing(_ chain: [Property], from entity: ResolvedEntity, changed: [ObjectIdentifier: Set<Int64>] = [:]) throws -> Set<ObjectID> {
        var affected: Set<Int64> = []
        for index in chain.indices.reversed() {
            let hop = chain[index]
            guard let destination = hop.destination else { return [] }
            let targets = pendingKeys(of: destination.rootDescription).union(affected)
                .union(changed[ObjectIdentifier(destination.rootDescription)] ?? [])
            // Nothing pending this far down the chain: an earlier hop's objects may still be
            // (the vault of `vault.keeper.name` got another keeper, no pet changed).
            guard !targets.isEmpty else {
                affected = []
                continue
            }
            let source = index == 0 ? entity : chain[index - 1].destination!
            affected = try keys(in: source.table, where: hop.name, in: targets)
        }
        return Set(affected.map { ObjectID(rootEntity: entity.rootDescription, primaryKey: $0) })
    }

    /// Which of `ids` lead, along `chain` (to-one hops), to one of `changed` (keys by root
    /// entity), read as this reader sees the rows — pending ones included, which SQL cannot
    /// follow. A level's rows are read in lists of keys.
    package mutating func leading(_ ids: Set<ObjectID>, along chain: [Property], to changed: [ObjectIdentifier: Set<Int64>]) throws -> Set<ObjectID> {
        var found = Set<ObjectID>()
        // Each object still followed, by the object it started from.
        var current = Dictionary(uniqueKeysWithValues: ids.map { ($0, $0) })
        for hop in chain {
            guard let destination = hop.destination, !current.isEmpty else { break }
            let root = destination.rootDescription
            _ = try rows(for: Array(Set(current.values)))
            var next: [ObjectID: ObjectID] = [:]
            for (origin, id) in current {
                guard let row = try row(id), hop.slot < row.values.count, case .integer(let key) = row.values[hop.slot] else { continue }
                if changed[ObjectIdentifier(root)]?.contains(key) == true {
                    found.insert(origin)
                } else {
                    next[origin] = ObjectID(rootEntity: root, primaryKey: key)
                }
            }
            current = next
        }
        return found
    }

    /// Primary keys of rows whose `column` holds one of `values`.
    private func keys(in table: Table, where column: String, in values: Set<Int64>) throws -> Set<Int64> {
        try chunked(values) { placeholders in
            "SELECT \"Z_PK\" FROM \(table.quotedName) WHERE \(column.quotedIdentifier) IN (\(placeholders))"
        }
    }

    /// The IDs related to `object` through a join-table relationship, store plus overlay.
    func joined(_ owner: ObjectID, _ property: Property) throws -> Set<ObjectID> {
        guard let join = property.joinTable, let destination = property.destination else { return [] }
        let (mine, theirs) = property.joinColumns
        var keys: Set<Int64> = []
        try session.connection.select("SELECT \(theirs) FROM \(join.quotedName) WHERE \(mine) = ?", [.integer(owner.primaryKey)]) { row in
            keys.insert(row.int64(0))
        }
        var changes = session.overlay.links(of: join.name)
        if let pinned = session.pinned {
            for (key, existed) in pinned.links where key.table == join.name { changes[key] = existed }
        }
        for (key, present) in changes {
            let (me, other) = property.ends(of: key)
            guard me == owner.primaryKey else { continue }
            if present { keys.insert(other) } else { keys.remove(other) }
        }
        return Set(keys.map { ObjectID(rootEntity: destination.rootDescription, primaryKey: $0) })
    }

    /// The members of `owner`'s to-many relationship as the reader sees them: stored, with
    /// pending commits, the pinned view and the context's own changes applied.
    package mutating func members(of owner: ObjectID, _ property: Property) throws -> [ObjectID] {
        try members(of: [owner], property)[owner] ?? []
    }

    /// The members of each owner's to-many relationship, read for all owners in a few
    /// statements (stored members, then pending commits, the pinned view and the context's
    /// own changes applied).
    mutating func members(of owners: [ObjectID], _ property: Property) throws -> [ObjectID: [ObjectID]] {
        guard let destination = property.destination, let ownerRoot = owners.first?.rootEntity else { return [:] }
        let root = destination.rootDescription
        var result: [ObjectID: [ObjectID]] = [:]
        for owner in owners { result[owner] = [] }
        let ownerKeys = Set(owners.map(\.primaryKey))
        let pending = pendingIDs(of: root)
        switch property.storage {
        case .joinTable:
            guard let join = property.joinTable else { return result }
            let (mine, theirs) = property.joinColumns
            var pairs: [Int64: Set<Int64>] = [:]
            try eachRow(keys: Array(ownerKeys), sql: { "SELECT \(mine), \(theirs) FROM \(join.quotedName) WHERE \(mine) IN (\($0))" }) { row in
                pairs[row.int64(0), default: []].insert(row.int64(1))
            }
            var changes = session.overlay.links(of: join.name)
            if let pinned = session.pinned {
                for (key, existed) in pinned.links where key.table == join.name { changes[key] = existed }
            }
            if let context {
                for (key, present) in context.pendingLinks(in: join.name) { changes[key] = present }
            }
            for (key, present) in changes {
                let (me, other) = property.ends(of: key)
                guard ownerKeys.contains(me) else { continue }
                if present { pairs[me, default: []].insert(other) } else { pairs[me]?.remove(other) }
            }
            for owner in owners {
                // Deleting a row deletes its join rows, so only pending members can be gone.
                for key in (pairs[owner.primaryKey] ?? []).sorted() {
                    let id = ObjectID(rootEntity: root, primaryKey: key)
                    if try !pending.contains(id) || row(id) != nil { result[owner]!.append(id) }
                }
            }
        case .inverseColumn:
            guard let inverse = property.inverse else { return result }
            // Stored members (the destination's family only, in a shared table).
            let members = try CompiledQuery(entity: destination, condition: nil, orderBy: nil)
            let alias = members.tableAliases[""]!
            try eachRow(keys: Array(ownerKeys), sql: { placeholders in
                let sql = members.fromWhere(extraWhere: ["\(alias).\(inverse.name.quotedIdentifier) IN (\(placeholders))"])
                return "SELECT \(alias).\"Z_PK\", \(alias).\(inverse.name.quotedIdentifier) \(sql.text)"
            }) { row in
                let id = ObjectID(rootEntity: root, primaryKey: row.int64(0))
                if !pending.contains(id) { result[ObjectID(rootEntity: ownerRoot, primaryKey: row.int64(1))]?.append(id) }
            }
            for id in pending.sorted() {
                guard let row = try row(id), destination.includes(row.entity),
                      case .integer(let owner) = row.values[inverse.slot], ownerKeys.contains(owner) else { continue }
                result[ObjectID(rootEntity: ownerRoot, primaryKey: owner)]?.append(id)
            }
        case .column:
            break
        }
        return result
    }

    /// Runs `sql(placeholders)` over `keys` in `IN` lists (`InLists.each`), handing each
    /// row to `body`.
    private func eachRow(keys: [Int64], sql: (String) throws -> String, _ body: (any QueryRow) throws -> Void) throws {
        try InLists.each(keys) { placeholders, arguments in
            try session.connection.select(try sql(placeholders), arguments, body)
        }
    }

    /// Objects of `query`'s entity whose to-many relationships, as read by the query's
    /// quantifiers and counts, may differ from what SQL sees: a member or a membership has
    /// pending changes. Their condition is evaluated in memory instead.
    mutating func ownersToRecheck(_ query: CompiledQuery) throws -> Set<ObjectID> {
        var result: Set<Int64> = []
        for use in query.toManyUses {
            let owners = try self.owners(of: use.property, reading: use.inner)
            // Through to-one hops, the objects to recheck are those whose hops lead to an owner.
            result.formUnion(use.hops.isEmpty ? owners : try rows(of: query.entity, reaching: owners, through: use.hops))
        }
        return Set(result.map { ObjectID(rootEntity: query.entity.rootDescription, primaryKey: $0) })
    }

    /// Primary keys of the owners of `property` whose members, or memberships, have pending
    /// changes (`inner`: the condition read on the members, whose own reads count too).
    private mutating func owners(of property: Property, reading inner: CompiledQuery?) throws -> Set<Int64> {
        var owners: Set<Int64> = []
        guard let destination = property.destination else { return [] }
        var dirty = pendingIDs(of: destination.rootDescription)
        if let inner {
            for chain in inner.hopChains { dirty.formUnion(try referencing(chain, from: destination)) }
            dirty.formUnion(try ownersToRecheck(inner))
        }
        let dirtyKeys = Set(dirty.map(\.primaryKey))
        switch property.storage {
        case .inverseColumn:
            guard let inverse = property.inverse else { return [] }
            for id in dirty {
                // Rows of the destination's root table include sibling sub-entities, which do
                // not have the inverse (nor as many slots).
                if let row = try row(id), destination.includes(row.entity), case .integer(let owner) = row.values[inverse.slot] { owners.insert(owner) }
            }
            owners.formUnion(try values(of: inverse.name, in: destination.table, forKeys: dirtyKeys))
        case .joinTable:
            guard let join = property.joinTable else { return [] }
            let (mine, theirs) = property.joinColumns
            var changed = session.overlay.links(of: join.name)
            if let pinned = session.pinned { for (key, value) in pinned.links where key.table == join.name { changed[key] = value } }
            if let context { for (key, value) in context.pendingLinks(in: join.name) { changed[key] = value } }
            for key in changed.keys { owners.insert(property.ends(of: key).owner) }
            owners.formUnion(try values(of: mine, inJoin: join, where: theirs, in: dirtyKeys))
        case .column:
            break
        }
        return owners
    }

    /// Primary keys of `entity`'s rows whose to-one `chain` leads to one of `targets`, as stored.
    private func rows(of entity: ResolvedEntity, reaching targets: Set<Int64>, through chain: [Property]) throws -> Set<Int64> {
        var affected = targets
        for index in chain.indices.reversed() where !affected.isEmpty {
            let source = index == 0 ? entity : chain[index - 1].destination!
            affected = try keys(in: source.table, where: chain[index].name, in: affected)
        }
        return affected
    }

    /// The integer `column` of the rows of `table` with the given primary keys.
    private func values(of column: String, in table: Table, forKeys keys: Set<Int64>) throws -> Set<Int64> {
        try chunked(keys) { placeholders in
            "SELECT \(column.quotedIdentifier) FROM \(table.quotedName) WHERE \"Z_PK\" IN (\(placeholders))"
        }
    }

    /// `column` of the join rows whose `other` column holds one of `keys`.
    private func values(of column: String, inJoin join: JoinTable, where other: String, in keys: Set<Int64>) throws -> Set<Int64> {
        try chunked(keys) { placeholders in
            "SELECT \(column) FROM \(join.quotedName) WHERE \(other) IN (\(placeholders))"
        }
    }

    /// Runs a one-column query over `keys` in chunks; the integers it returns.
    private func chunked(_ keys: Set<Int64>, _ sql: (String) -> String) throws -> Set<Int64> {
        var result: Set<Int64> = []
        try eachRow(keys: Array(keys), sql: sql) { row in
            if !row.isNull(0) { result.insert(row.int64(0)) }
        }
        return result
    }

    /// Whether a join-table pair exists now (overlay over store).
    package func linkExists(_ key: LinkKey) throws -> Bool {
        // A pinned view sees the pair as it was when pinned, as its reads of members do.
        if let pinned = session.pinned?.links[key] { return pinned }
        if let pending = session.overlay.links(of: key.table)[key] { return pending }
        return try storedLinkExists(key)
    }

    /// The stored values of those of `slots` of the row `id` that a commit in the overlay
    /// changed (none for a row a commit in it inserted): what a pinned view's image of them
    /// goes back to should those commits fail (`PinnedImages.storedSlots`).
    func storedValues(of id: ObjectID, underOverlay slots: some Sequence<Int>) throws -> [Int: Value] {
        guard case .updated(_, let changed, _)? = session.overlay.entry(for: id)?.pending else { return [:] }
        let pending = slots.filter(changed.contains)
        guard !pending.isEmpty, let row = try storedRow(id) else { return [:] }
        return Dictionary(pending.filter { $0 < row.values.count }.map { ($0, row.values[$0]) }, uniquingKeysWith: { first, _ in first })
    }

    /// Whether the pair `key` is stored, when a commit in the overlay adds or removes it (`nil`
    /// otherwise): see `storedValues(of:underOverlay:)`.
    func storedLink(underOverlay key: LinkKey) throws -> Bool? {
        guard session.overlay.links(of: key.table)[key] != nil else { return nil }
        return try storedLinkExists(key)
    }

    private func storedLinkExists(_ key: LinkKey) throws -> Bool {
        var exists = false
        try session.connection.select("SELECT 1 FROM \(key.table.quotedIdentifier) WHERE source = ? AND target = ?",
                                      [.integer(key.source), .integer(key.target)]) { _ in exists = true }
        return exists
    }
}

extension RowReader {
    /// The rows matching `query`, in order, windowed by `offset` and `limit`, merging the
    /// reading context's pending changes (if any) and the writer's pending commits with the
    /// store; see `ContextCore.selectRows`.
    ///
    /// `keyOrderInMemory`: the caller puts the rows in key order itself when the query has
    /// neither an order nor a window, so SQL may hand them over in any order (see
    /// `CompiledQuery.orderBySQL(byKey:)`); other queries come in order either way.
    @discardableResult
    package mutating func select(_ query: CompiledQuery, offset: Int, limit: Int?, columns: [Int]?, keyOrderInMemory: Bool = false,
                                 expecting: (Int) -> Void, _ sink: (ObjectID, consuming ObjectRow) throws -> Void) throws -> Bool {
        let recheck = try self.recheck(query)
        let table = query.entity.table!
        if recheck.isEmpty && !query.filtersInMemory {
            // Nothing pending: SQL's window is the answer.
            let sql = storedWindow(query, offset: offset, limit: limit, columns: columns, byKey: !keyOrderInMemory)
            try eachRow(sql, table: table, columns: columns, expecting: expecting, sink)
            return columns == nil
        }
        // A negative window counts as 0, as in SQL's window (`storedWindow`).
        let (offset, limit) = (max(offset, 0), limit.map { max($0, 0) })
        var sql = query.fromWhere(selecting: selectColumns(table, alias: "t0"))
        sql.text += " " + query.orderBySQL()
        // Each pending object can push at most one stored row out of the window, so the
        // first offset + limit + pending stored rows hold every row the window can need —
        // unless SQL selects a superset that memory filters, when any row may drop out.
        if let limit, !query.filtersInMemory {
            // Saturating: a client's `?offset=` may be as large as an Int goes.
            let (rows, overflow) = offset.addingReportingOverflow(limit)
            let needed = overflow || rows > Int.max - recheck.count ? Int.max : rows + recheck.count
            sql.text += " " + query.dialect.window(limit: needed, offset: 0, arguments: &sql.arguments)
        }
        var found = try self.rows(sql, table: table).filter { !recheck.contains($0.id) }
        if query.filtersInMemory {
            found = try found.filter { try query.matches($0.id, $0.row.values, resolve: { try self.row($0) }, members: { try self.members(of: $0, $1) }) }
        }
        for id in recheck {
            guard let row = try self.row(id), query.accepts(row.entity) else { continue }
            if try query.matches(id, row.values, resolve: { try self.row($0) }, members: { try self.members(of: $0, $1) }) {
                found.append((id, row))
            }
        }
        try found.sort { a, b in
            try query.sortsBefore((a.id, a.row.values), (b.id, b.row.values), resolve: { try self.row($0) })
        }
        if offset > 0 { found.removeFirst(min(offset, found.count)) }
        if let limit, found.count > limit { found.removeLast(found.count - limit) }
        expecting(found.count)
        for (id, row) in found { try sink(id, row) }
        return true
    }

    /// `select`'s whole rows without decoding them, when nothing pending changes the answer:
    /// each row reaches `body` as the connection's current row (valid only during the call, its
    /// columns at the entity's `slotPositions`), with its ID and entity. The entity comes
    /// unretained (the model keeps it alive): retaining and releasing it for every row cost
    /// more than a tenth of reading snapshots. Returns `false`,
    /// having read nothing, when pending commits or a condition SQL cannot decide alone mean the
    /// rows must be merged in memory; then use `select`. `keyOrderInMemory` as for `select`.
    package mutating func selectInPlace(_ query: CompiledQuery, offset: Int, limit: Int?, keyOrderInMemory: Bool = false, expecting: (Int) -> Void,
                                        _ body: (ObjectID, Unmanaged<ResolvedEntity>, any QueryRow) throws -> Void) throws -> Bool {
        guard !query.filtersInMemory, try recheck(query).isEmpty, let root = graph.entity(named: query.entity.table!.name) else { return false }
        let sql = storedWindow(query, offset: offset, limit: limit, columns: nil, byKey: !keyOrderInMemory)
        let identify = RowIdentifier(root)
        try session.connection.select(sql.text, sql.arguments, expecting: expecting) { row in
            if let (id, entity) = identify(row) { try body(id, entity, row) }
        }
        return true
    }

    /// The objects whose stored rows may not be the answer for `query`: pending ones, those
    /// whose to-one hops reach pending ones, and owners of to-manys with pending members.
    private mutating func recheck(_ query: CompiledQuery) throws -> Set<ObjectID> {
        var recheck = pendingIDs(of: query.entity.rootDescription)
        for chain in query.hopChains {
            recheck.formUnion(try referencing(chain, from: query.entity))
        }
        recheck.formUnion(try ownersToRecheck(query))
        return recheck
    }

    /// The SELECT of `query`'s window from the store alone.
    /// Whole rows reuse the text of an earlier query of the same shape (`CompiledQuery.windowSQL`).
    /// `byKey: false`: a query without an order or a window may leave out the key's order
    /// (its caller sorts); any other query keeps it.
    private func storedWindow(_ query: CompiledQuery, offset: Int, limit: Int?, columns: [Int]?, byKey: Bool = true) -> CompiledQuery.SQL {
        let byKey = byKey || !query.isInKeyOrderAlone(offset: offset, limit: limit)
        // The closure is written at the call, not kept in a constant: a closure in a constant
        // escapes, and copied this reader and the query into its context for every query
        // (2,500 instructions of a 50,000-instruction prefix query, under callgrind).
        guard columns == nil else { return writeWindow(query, offset: offset, limit: limit, columns: columns, byKey: byKey) }
        return query.windowSQL(offset: offset, limit: limit, byKey: byKey) {
            writeWindow(query, offset: offset, limit: limit, columns: nil, byKey: byKey)
        }
    }

    private func writeWindow(_ query: CompiledQuery, offset: Int, limit: Int?, columns: [Int]?, byKey: Bool) -> CompiledQuery.SQL {
        var sql = query.fromWhere(selecting: selectColumns(query.entity.table!, alias: "t0", columns: columns))
        let order = query.orderBySQL(byKey: byKey)
        if !order.isEmpty { sql.text += " " + order }
        if limit != nil || offset > 0 {
            sql.text += " " + query.dialect.window(limit: limit, offset: offset, arguments: &sql.arguments)
        }
        return sql
    }
}

/// Tells the ID and entity of each row a select made with `RowReader.selectColumns` returns,
/// with what it needs of the table's root entity read once per select, not once a row.
private struct RowIdentifier {
    let root: ResolvedEntity
    let rootDescription: EntityDescription
    /// The entities sharing the table, when it has an entity column.
    let family: [ResolvedEntity]?

    init(_ root: ResolvedEntity) {
        self.root = root
        rootDescription = root.description_
        family = root.table!.hasEntityColumn ? root.family : nil
    }

    /// The row's ID and entity, unretained (the model keeps it alive); `nil` for a row of an
    /// entity code the model does not know.
    func callAsFunction(_ row: any QueryRow) -> (id: ObjectID, entity: Unmanaged<ResolvedEntity>)? {
        var entity = Unmanaged.passUnretained(root)
        if let family {
            let code = row.int64(1)
            guard let member = family.first(where: { $0.entityCode == code }) else { return nil }
            entity = Unmanaged.passUnretained(member)
        }
        return (ObjectID(rootEntity: rootDescription, primaryKey: row.int64(0)), entity)
    }
}
