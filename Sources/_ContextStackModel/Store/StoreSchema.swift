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

    /// Which old column each column of `table` takes its values from in a migration, on every
    /// store. A column whose own name is an old column keeps that one; one that is not takes
    /// the old column its property names as `originalName`. A renamed column goes to the
    /// property that names it, even when a new attribute is given the old name: that one is a
    /// new column. Two properties naming one old column: the first declared takes it.
    ///
    /// Renames may chain in one version (`label` renamed `caption` and `serial` renamed
    /// `label`): a column whose own old column went to another takes the one its property
    /// names, so the new `label` holds the serials rather than starting empty. A column whose
    /// own old column stays is never renamed: an `originalName` left on a property after its
    /// rename (as Core Data advises for `renamingIdentifier`) must not move values again once
    /// a new attribute takes that name.
    package struct ColumnSources {
        /// New column name to the old column it is renamed from.
        package private(set) var renamed: [String: String] = [:]
        /// The renamed columns in an order a store can rename them in place: each one's name
        /// is free (its own old column renamed away) by the time it comes.
        package private(set) var renameOrder: [String] = []
        private var renamedAway: Set<String> = []
        private let oldColumns: Set<String>

        package init(of table: Table, in family: [ResolvedEntity], oldColumns: Set<String>) {
            self.oldColumns = oldColumns
            func original(of column: Table.Column) -> String? {
                let property = family.lazy.compactMap { $0.property(named: column.name) }.first
                guard let original = property?.declared.originalName, original != column.name,
                      oldColumns.contains(original), !renamedAway.contains(original) else { return nil }
                return original
            }
            // New names first; then, until nothing changes, old names whose column went away:
            // each round follows every chain one step further back.
            var candidates = table.columns.filter { !oldColumns.contains($0.name) }
            var waiting = table.columns.filter { oldColumns.contains($0.name) }
            while !candidates.isEmpty {
                for column in candidates {
                    guard let original = original(of: column) else { continue }
                    renamed[column.name] = original
                    renameOrder.append(column.name)
                    renamedAway.insert(original)
                }
                candidates = waiting.filter { renamedAway.contains($0.name) && renamed[$0.name] == nil }
                waiting.removeAll { renamedAway.contains($0.name) }
            }
        }

        /// The old column the column `name` takes its values from; `nil` for a new column.
        package func source(of name: String) -> String? {
            renamed[name] ?? (oldColumns.contains(name) && !renamedAway.contains(name) ? name : nil)
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
                guard let property = holders.first?.property(named: column.name) else { continue }
                let value = holders.first!.defaults[property.slot]
                if value == .null { continue }
                var sql = "UPDATE \(table.quotedName) SET \(column.name.quotedIdentifier) = ? WHERE \(column.name.quotedIdentifier) IS NULL"
                if table.hasEntityColumn && holders.count < family.count {
                    sql += " AND \"Z_ENT\" IN (\(holders.map { String($0.entityCode) }.joined(separator: ", ")))"
                }
                fills.append((sql, value))
            }
        }
        return fills
    }
}
