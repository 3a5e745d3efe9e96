import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// The part of a model that one store holds — the whole model, or one configuration — and the
/// SQL that creates it.
///
/// Each store file keeps the description and hash of its own part in `Z_METADATA`, so a file
/// written for configuration "Database" knows nothing of the entities in "InMemory".
package struct StoreSchema: Sendable {
    /// The configuration, or `nil` for every entity of the model.
    let configuration: String?
    let entities: [ResolvedEntity]
    let tables: [Table]
    let joinTables: [JoinTable]
    /// The text kept in `Z_METADATA` under `schema`; migration reads the old one back.
    let description: String
    /// The hash of `description`, kept under `hash`: equal hashes need no migration.
    let hash: String

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

    // MARK: - SQL

    /// Every statement that creates this part in an empty database, prefixed with `database.`
    /// when it goes into an attached database.
    func creationStatements(in database: String? = nil) -> [String] {
        let prefix = database.map { "\($0.quotedIdentifier)." } ?? ""
        var statements = [
            "CREATE TABLE \(prefix)Z_METADATA (key TEXT PRIMARY KEY, value)",
            "CREATE TABLE \(prefix)Z_KEYS (name TEXT PRIMARY KEY, next INTEGER NOT NULL)",
        ]
        for table in tables {
            statements.append(createTable(table, named: prefix + table.quotedName))
            statements.append("INSERT INTO \(prefix)Z_KEYS (name, next) VALUES (\(table.name.quotedLiteral), 1)")
        }
        for join in joinTables { statements.append(createJoinTable(named: prefix + join.quotedName)) }
        statements += indexes.map { index in
            index.sql.replacingOccurrences(of: "INDEX \(index.name.quotedIdentifier)", with: "INDEX \(prefix)\(index.name.quotedIdentifier)")
        }
        statements.append(metadataStatement(in: prefix))
        return statements
    }

    /// `CREATE TABLE` for `table` under the (quoted) name `name`.
    func createTable(_ table: Table, named name: String) -> String {
        var columns = ["\"Z_PK\" INTEGER PRIMARY KEY"]
        if table.hasEntityColumn { columns.append("\"Z_ENT\" INTEGER NOT NULL") }
        for column in table.columns {
            // Foreign keys are declared for the schema's readers; ContextStack keeps them
            // itself (delete rules), so SQLite's enforcement stays off.
            let reference = column.references.map { " REFERENCES \($0.quotedIdentifier) (\"Z_PK\")" } ?? ""
            columns.append("\(column.name.quotedIdentifier) \(column.type)\(reference)")
        }
        return "CREATE TABLE \(name) (\(columns.joined(separator: ", ")))"
    }

    func createJoinTable(named name: String) -> String {
        "CREATE TABLE \(name) (source INTEGER NOT NULL, target INTEGER NOT NULL, PRIMARY KEY (source, target)) WITHOUT ROWID"
    }

    /// Every index the part wants, by name, with the exact SQL that creates it (SQLite keeps
    /// that text in `sqlite_master`, which is how migration tells an index apart from a changed one).
    var indexes: [(name: String, table: String, sql: String)] {
        var result: [(name: String, table: String, sql: String)] = []
        for table in tables {
            for column in table.columns where column.isIndexed {
                let name = "Z_\(table.name)_\(column.name)"
                result.append((name, table.name, "CREATE INDEX \(name.quotedIdentifier) ON \(table.quotedName) (\(column.name.quotedIdentifier))"))
            }
            for constraint in table.uniqueConstraints {
                result.append((constraint.indexName, table.name, constraint.createIndexSQL))
            }
        }
        for join in joinTables {
            let name = "\(join.name)_target"
            result.append((name, join.name, "CREATE INDEX \(name.quotedIdentifier) ON \(join.quotedName) (target)"))
        }
        return result
    }

    /// Records this part's description and hash (replacing what was there).
    func metadataStatement(in prefix: String = "") -> String {
        "INSERT OR REPLACE INTO \(prefix)Z_METADATA (key, value) VALUES ('hash', \(hash.quotedLiteral)), ('schema', \(description.quotedLiteral)), ('format', 1)"
    }
}
