import _ContextStackCore
import _ContextStackModel

// The SQL that creates a store's part of the model in a PostgreSQL database.
//
// The tables mean what they mean on SQLite, so that every predicate, order and aggregate
// keeps its meaning:
// - column types hold exactly the storage class a SQLite column holds for the attribute:
//   INTEGER → bigint (booleans as 1 and 0), REAL → double precision, TEXT → text, BLOB → bytea;
// - text columns use the "C" collation, so `<`, `ORDER BY` and unique indexes compare by bytes,
//   as SQLite's BINARY collation does, whatever the database's default;
// - every entity table has a `Z_VERSION` column, the row version that optimistic concurrency
//   checks when several processes or machines write the same rows;
// - no foreign key constraints: ContextStack keeps relationships and delete rules itself (a
//   `.noAction` rule may leave a reference dangling by design), as SQLite does with its
//   enforcement off; the foreign-key columns are indexed as there;
// - keys come from one sequence per table (`PostgresKeys`), not from a `Z_KEYS` table, so
//   reserving them never waits for another transaction's lock.

extension StoreSchema {
    /// PostgreSQL cuts identifiers longer than this many bytes (NAMEDATALEN - 1) without an
    /// error, so two long names could become one: the store refuses them instead.
    package static let postgresIdentifierLimit = 63

    /// The identifiers this part would create that PostgreSQL would shorten.
    package var postgresIdentifiersTooLong: [String] {
        var names = tables.flatMap { [$0.name, Self.sequenceName(of: $0)] + $0.columns.map(\.name) }
        names += joinTables.map(\.name)
        names += indexes.map(\.name)
        return names.filter { $0.utf8.count > Self.postgresIdentifierLimit }
    }

    /// The sequence that hands out `table`'s primary keys.
    package static func sequenceName(of table: Table) -> String { sequenceName(ofTableNamed: table.name) }
    static func sequenceName(ofTableNamed name: String) -> String { "Z_KEYS_\(name)" }

    /// The table every part in a database keeps its description and hash in.
    package static let postgresMetadataTable = "CREATE TABLE \"Z_METADATA\" (key text COLLATE \"C\" PRIMARY KEY, value text)"

    /// The key of this part's hash in `Z_METADATA`: `hash` for a whole model, `hash:Name` for
    /// configuration "Name", so that several configurations can share one database.
    package var postgresHashKey: String { configuration.map { "hash:\($0)" } ?? "hash" }
    /// The key of this part's model history in `Z_METADATA` (`ModelHistory`).
    package var postgresModelsKey: String { configuration.map { "models:\($0)" } ?? "models" }
    /// The key of this part's description in `Z_METADATA`.
    package var postgresSchemaKey: String { configuration.map { "schema:\($0)" } ?? "schema" }

    /// The statements that create this part's tables, sequences and indexes.
    package var postgresPartStatements: [String] {
        var statements: [String] = []
        for table in tables {
            statements.append(postgresCreateTable(table))
            statements.append("CREATE SEQUENCE \(Self.sequenceName(of: table).quotedIdentifier) AS bigint")
        }
        for join in joinTables { statements.append(Self.postgresCreateJoinTable(join)) }
        statements += indexes.flatMap(Self.postgresIndexStatements)
        return statements
    }

    /// Creates `index`, with the SQL that made it as its comment: what a migration compares
    /// with the SQL the model wants, to keep an index that did not change
    /// (`PostgresMigration.dropIndexes`).
    static func postgresIndexStatements(_ index: Index) -> [String] {
        [index.sql, "COMMENT ON INDEX \(index.name.quotedIdentifier) IS \(index.sql.quotedLiteral)"]
    }

    /// `CREATE TABLE` for one entity hierarchy's table.
    func postgresCreateTable(_ table: Table) -> String {
        var columns = ["\"Z_PK\" bigint PRIMARY KEY"]
        if table.hasEntityColumn { columns.append("\"Z_ENT\" bigint NOT NULL") }
        columns.append("\"Z_VERSION\" bigint NOT NULL DEFAULT 1")
        for column in table.columns {
            columns.append("\(column.name.quotedIdentifier) \(Self.postgresType(of: column))")
        }
        return "CREATE TABLE \(table.quotedName) (\(columns.joined(separator: ", ")))"
    }

    /// `CREATE TABLE` for a join table: one row per related pair.
    static func postgresCreateJoinTable(_ join: JoinTable) -> String {
        "CREATE TABLE \(join.quotedName) (source bigint NOT NULL, target bigint NOT NULL, PRIMARY KEY (source, target))"
    }

    /// How `information_schema.columns.data_type` names `postgresType(of: column)`.
    static func postgresDataType(of column: Table.Column) -> String {
        switch column.type {
        case "INTEGER": "bigint"
        case "REAL": "double precision"
        case "TEXT": "text"
        default: "bytea"
        }
    }

    /// The PostgreSQL type holding what SQLite's column type holds.
    static func postgresType(of column: Table.Column) -> String {
        switch column.type {
        case "INTEGER": "bigint"
        case "REAL": "double precision"
        case "TEXT": "text COLLATE \"C\""
        case "BLOB": "bytea"
        default: preconditionFailure("No PostgreSQL type for the column type \(column.type) of \(column.name): add it to StoreSchema.postgresType(of:).")
        }
    }

    /// Records this part's description and hash, replacing what was there.
    package var postgresMetadataStatement: String {
        "INSERT INTO \"Z_METADATA\" (key, value) VALUES (\(postgresHashKey.quotedLiteral), \(hash.quotedLiteral)), (\(postgresSchemaKey.quotedLiteral), \(description.quotedLiteral)), ('format', '1'), "
            + "(\(postgresModelsKey.quotedLiteral), \(hash.quotedLiteral)) "
            + "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    }
}
