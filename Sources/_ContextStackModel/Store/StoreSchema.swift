import _ContextStackCore

/// The part of a model that one store holds — the whole model, or one configuration — and the
/// SQL that creates it.
///
/// Each store keeps the description and hash of its own part in `Z_METADATA`, so a file
/// written for configuration "Database" knows nothing of the entities in "InMemory". What is
/// here is the same for every store; the SQL that creates a part is each store's own
/// (`StoreSchema+SQLite.swift`, and the PostgreSQL store's).
package struct StoreSchema: Sendable {
    /// The configuration, or `nil` for every entity of the model.
    package let configuration: String?
    package let entities: [ResolvedEntity]
    package let tables: [Table]
    package let joinTables: [JoinTable]
    /// The text kept in `Z_METADATA` under `schema`; migration reads the old one back.
    package let description: String
    /// The hash of `description`, kept under `hash`: equal hashes need no migration.
    package let hash: String

    package init(graph: ModelGraph, configuration: String?) {
        self.configuration = configuration
        guard let configuration, let names = graph.configurations[configuration] else {
            entities = graph.entities
            tables = graph.tables
            joinTables = graph.joinTables
            description = graph.schemaDescription
            hash = graph.versionHash
            return
        }
        entities = graph.entities.filter { names.contains($0.name) }
        let tableNames = Set(entities.map(\.rootDescription.name))
        tables = graph.tables.filter { tableNames.contains($0.name) }
        var joins: [String: JoinTable] = [:]
        for entity in entities {
            for property in entity.properties where property.storage == .joinTable {
                if let join = property.joinTable { joins[join.name] = join }
            }
        }
        joinTables = joins.keys.sorted().map { joins[$0]! }
        description = ModelGraph.describe(tables: tables, joinTables: joinTables, entities: entities)
        hash = ModelGraph.fnv1a(description)
    }

    /// The names of the entities this store holds.
    package var entityNames: Set<String> { Set(entities.map(\.name)) }

    /// A to-many relationship whose pairs `join` holds, with its entity (the first entity
    /// that has it, for one a sub-entity inherits).
    package func side(of join: JoinTable) -> (entity: ResolvedEntity, property: Property)? {
        for entity in entities {
            for property in entity.properties where property.joinTable === join { return (entity, property) }
        }
        return nil
    }

    /// Every index the part wants, by name, with the exact SQL that creates it. The SQL is the
    /// same on every store. SQLite keeps that text in `sqlite_master`, which is how its
    /// migration tells an index apart from a changed one.
    /// With each, the columns it indexes, in order.
    package var indexes: [Index] {
        var result: [Index] = []
        for table in tables {
            for column in table.columns where column.isIndexed {
                let name = "Z_\(table.name)_\(column.name)"
                result.append(Index(name: name, table: table.name, columns: [column.name],
                                    sql: "CREATE INDEX \(name.quotedIdentifier) ON \(table.quotedName) (\(column.name.quotedIdentifier))"))
            }
            for constraint in table.uniqueConstraints {
                result.append(Index(name: constraint.indexName, table: table.name, columns: constraint.keys, sql: constraint.createIndexSQL))
            }
        }
        for join in joinTables {
            let name = "\(join.name)_target"
            result.append(Index(name: name, table: join.name, columns: ["target"],
                                sql: "CREATE INDEX \(name.quotedIdentifier) ON \(join.quotedName) (target)"))
        }
        return result
    }

    /// Which old column each column, and which old table each table, takes its data from in a
    /// migration, on every store. A name that is an old one keeps that one; one that is not
    /// takes the old one its property (for a table, its root entity) names as `originalName`.
    /// A renamed column or table goes to what names it, even when something new is given the
    /// old name: that one is new. Two new names naming one old column or table: the first
    /// declared takes it (a new name before a chained one, whatever their order).
    ///
    /// Renames may chain in one version (`label` renamed `caption` and `serial` renamed
    /// `label`): a name whose own old column or table went to another takes the one its
    /// `originalName` names, so the new `label` holds the serials rather than starting empty.
    /// A name whose own old column or table stays is never renamed: an `originalName` left in
    /// place after its rename (as Core Data advises for `renamingIdentifier`) must not move data
    /// again once something new takes that name.
    package struct RenameSources {
        /// New name to the old one it is renamed from.
        package private(set) var renamed: [String: String] = [:]
        /// The renamed names in an order a store can rename them in place: each one is free
        /// (its own old column or table renamed away) by the time it comes.
        package private(set) var renameOrder: [String] = []
        private var renamedAway: Set<String> = []
        private let old: Set<String>
        private let names: Set<String>

        /// The sources of `names`, in declaration order, among `old`; `originalName` gives each
        /// one's declared original name.
        package init(names: [String], old: Set<String>, originalName: (String) -> String?) {
            self.old = old
            self.names = Set(names)
            // New names first; then, until nothing changes, old names whose own went away:
            // each round follows every chain one step further back.
            var candidates = names.filter { !old.contains($0) }
            var waiting = names.filter { old.contains($0) }
            while !candidates.isEmpty {
                for name in candidates {
                    guard let original = originalName(name), original != name, old.contains(original),
                          !renamedAway.contains(original) else { continue }
                    renamed[name] = original
                    renameOrder.append(name)
                    renamedAway.insert(original)
                }
                candidates = waiting.filter { renamedAway.contains($0) && renamed[$0] == nil }
                waiting.removeAll { renamedAway.contains($0) }
            }
        }

        /// The columns of `table`, whose properties are `family`'s, among `oldColumns`.
        package init(columnsOf table: Table, in family: [ResolvedEntity], oldColumns: Set<String>) {
            self.init(names: table.columns.map(\.name), old: oldColumns) { name in
                family.lazy.compactMap { $0.property(named: name) }.first?.declared.originalName
            }
        }

        /// The tables of `schema`'s entity hierarchies, among `oldTables` (the old model's that
        /// the database has). A hierarchy takes the old table its entities had as their own
        /// (`ownOldTable`): its root's, renamed or not, or — a parent entity added over one —
        /// the one member's that had a table, whose rows stay as that member's.
        package init(tablesOf schema: StoreSchema, oldTables: Set<String>) {
            let renamedFrom = schema.renamedFrom
            self.init(names: schema.tables.map(\.name), old: oldTables) { name in
                let owned = Set(schema.entities.filter { $0.table?.name == name }.compactMap {
                    StoreSchema.ownOldTable(of: $0, oldTables: oldTables, renamedFrom: renamedFrom)
                })
                return owned.count == 1 ? owned.first : nil
            }
        }

        /// The join tables of `schema`, among `oldJoins` (the old model's that the database
        /// has), each renamed from the name `old` gives it after the entity tables' renames
        /// (`tables`): a new entity given an old one's name does not take that one's pairs.
        package init(joinsOf schema: StoreSchema, oldJoins: Set<String>, tables: RenameSources, old: OldSchema) {
            let joins = Dictionary(schema.joinTables.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
            self.init(names: schema.joinTables.map(\.name), old: oldJoins) { name in
                joins[name].flatMap { old.previousName(of: $0, in: schema, tables: tables, excluding: name)?.name }
            }
        }

        /// `items`, each named by `name`, in the order a store migrates them in place: the
        /// renamed ones first, in `renameOrder`, then the others as they come.
        package func inRenameOrder<T>(_ items: [T], name: (T) -> String) -> [T] {
            let byName = Dictionary(items.map { (name($0), $0) }, uniquingKeysWith: { first, _ in first })
            return renameOrder.compactMap { byName[$0] } + items.filter { renamed[name($0)] == nil }
        }

        /// The old name `name` takes its data from; `nil` for something new.
        package func source(of name: String) -> String? {
            renamed[name] ?? (old.contains(name) && !renamedAway.contains(name) ? name : nil)
        }

        /// Whether one of the names takes its data from the old one `oldName`.
        package func takes(_ oldName: String) -> Bool {
            renamedAway.contains(oldName) || (names.contains(oldName) && old.contains(oldName))
        }
    }

    /// A column of a table shared by sub-entities whose rows take their values from different
    /// old columns, entity by entity: an attribute renamed in one sub-entity (`Dog.title`
    /// from `name`) while a sibling keeps the name (`Cat.name`) that both stored in one column.
    /// The table-wide `RenameSources` gives the old column to the rename alone; here each
    /// entity's rows are given theirs.
    package struct SplitColumn {
        package let column: String
        /// By the entity's code in the old table: the old column its rows' values come from,
        /// `nil` for none (the entity does not have the property, or it is new to it).
        package let sources: [(oldCode: Int64, source: String?)]
    }

    /// The split columns of `table` (whose entities are `family`), among the old table's
    /// columns `oldColumns`, against the table-wide sources `tableWide`, and what they lose.
    /// Each entity's sources follow `RenameSources`' rules among the properties that entity had
    /// (`old`); a column is split when an entity that has it takes another old column than the
    /// table-wide one, or when an entity's rows hold values in the table-wide one that are not
    /// theirs (it no longer has the property, or has it anew): those are emptied.
    ///
    /// `holdsValues(code, column)` says whether rows of the entity of that old code hold a
    /// value in that old column; only rows that do need anything done. `lost` names the values
    /// of an entity that an old column held and no column takes any more, while other
    /// entities' values in it stay (`ModelHistory.refusal`; a column no one takes is the
    /// store's to name).
    package static func splitColumns(of table: Table, family: [ResolvedEntity], oldColumns: Set<String>, old: OldSchema,
                                     tableWide: RenameSources, holdsValues: (Int64, String) throws -> Bool)
    rethrows -> (splits: [SplitColumn], lost: [String]) {
        guard table.hasEntityColumn else { return ([], []) }
        // Each check reads the table: asked once per entity and column.
        var known: [String: Bool] = [:]
        func holds(_ code: Int64, _ column: String) throws -> Bool {
            if let answer = known["\(code) \(column)"] { return answer }
            let answer = try holdsValues(code, column)
            known["\(code) \(column)"] = answer
            return answer
        }
        let entities = family.compactMap { entity -> (entity: ResolvedEntity, code: Int64, had: Set<String>, sources: RenameSources)? in
            guard let code = old.entityCode(of: entity), let had = old.propertyNames(of: entity)?.intersection(oldColumns) else { return nil }
            let names = entity.properties.filter(\.isStored).map(\.name)
            return (entity, code, had, RenameSources(names: names, old: had) { entity.property(named: $0)?.declared.originalName })
        }
        var splits: [SplitColumn] = []
        // Old column → the codes of the entities whose values in it a column takes.
        var taken: [String: Set<Int64>] = [:]
        for column in table.columns {
            let wide = tableWide.source(of: column.name)
            var sources: [(oldCode: Int64, source: String?)] = []
            for entity in entities {
                let source = entity.entity.property(named: column.name) == nil ? nil : entity.sources.source(of: column.name)
                if let source { taken[source, default: []].insert(entity.code) }
                guard source != wide else { continue }
                if source == nil, let wide, try !holds(entity.code, wide) { continue }
                sources.append((entity.code, source))
            }
            if !sources.isEmpty { splits.append(SplitColumn(column: column.name, sources: sources)) }
        }
        var lost: [String] = []
        for (column, codes) in taken.sorted(by: { $0.key < $1.key }) {
            for entity in entities where entity.had.contains(column) && !codes.contains(entity.code) {
                if try holds(entity.code, column) { lost.append("the values of \(entity.entity.name).\(column)") }
            }
        }
        return (splits, lost)
    }

    /// The names entities of this part name as their `originalName` (renamed from).
    var renamedFrom: Set<String> {
        Set(entities.compactMap { entity in entity.description_.originalName.flatMap { $0 == entity.name ? nil : $0 } })
    }

    /// The old table `entity` had as its own (it was a hierarchy's root), among `oldTables`:
    /// the one its `originalName` names, or the one of its name unless another entity is
    /// renamed from that one (`renamedFrom`), which takes it; `nil` when it had none.
    static func ownOldTable(of entity: ResolvedEntity, oldTables: Set<String>, renamedFrom: Set<String>) -> String? {
        if let original = entity.description_.originalName, original != entity.name, oldTables.contains(original) { return original }
        return oldTables.contains(entity.name) && !renamedFrom.contains(entity.name) ? entity.name : nil
    }

    /// Throws when a hierarchy of the model holds several entities that had tables of their
    /// own among `oldTables` (`Car` and `Truck` put under a new `Vehicle`, `ownOldTable`): the
    /// rows of both would have to share one table, where their keys collide, and dropping one
    /// table's rows is not a migration to make silently.
    package func checkNoTablesMerged(oldTables: Set<String>) throws {
        let renamedFrom = self.renamedFrom
        for table in tables {
            let had = entities.filter { $0.table === table && Self.ownOldTable(of: $0, oldTables: oldTables, renamedFrom: renamedFrom) != nil }
            guard had.count > 1 else { continue }
            let names = had.map(\.name).joined(separator: ", ")
            throw StoreError(.cannotMigrate, "\(names) each had a table of their own, and the model puts them in one hierarchy (\(table.name)): their rows cannot share one table, as their keys collide, so lightweight migration cannot infer it. Nothing was changed. Keep them apart, or copy the rows into the new entities yourself.")
        }
    }

    /// An index a part wants (`indexes`).
    package struct Index: Sendable {
        package let name: String
        package let table: String
        package let columns: [String]
        package let sql: String
    }

    /// What a migration runs to give non-optional attributes their default where the store
    /// holds `NULL` (an attribute that was optional, or a column added for a new attribute):
    /// one `UPDATE` per column, binding the default. The same on every store.
    package var defaultFills: [(sql: String, value: Value)] {
        var fills: [(sql: String, value: Value)] = []
        for table in tables {
            let family = entities.filter { $0.table === table }
            for column in table.columns {
                let holders = family.filter { entity in
                    guard let property = entity.property(named: column.name) else { return false }
                    return property.isAttribute && !property.isOptional
                }
                // Sub-entities sharing the column may give it different defaults: one fill each.
                var byDefault: [(value: Value, entities: [ResolvedEntity])] = []
                for holder in holders {
                    let value = holder.defaults[holder.property(named: column.name)!.slot]
                    if value == .null { continue }
                    if let index = byDefault.firstIndex(where: { $0.value == value }) {
                        byDefault[index].entities.append(holder)
                    } else {
                        byDefault.append((value, [holder]))
                    }
                }
                for (value, entities) in byDefault {
                    var sql = "UPDATE \(table.quotedName) SET \(column.name.quotedIdentifier) = ? WHERE \(column.name.quotedIdentifier) IS NULL"
                    if table.hasEntityColumn && entities.count < family.count {
                        sql += " AND \"Z_ENT\" IN (\(entities.map { String($0.entityCode) }.joined(separator: ", ")))"
                    }
                    fills.append((sql, value))
                }
            }
        }
        return fills
    }
}
