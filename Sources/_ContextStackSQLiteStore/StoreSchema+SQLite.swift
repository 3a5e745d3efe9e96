import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

// The SQL that creates a store's part of the model in an SQLite database.

extension StoreSchema {
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

    /// Records this part's description and hash (replacing what was there).
    func metadataStatement(in prefix: String = "") -> String {
        "INSERT OR REPLACE INTO \(prefix)Z_METADATA (key, value) VALUES ('hash', \(hash.quotedLiteral)), ('schema', \(description.quotedLiteral)), ('format', 1), ('models', \(hash.quotedLiteral))"
    }
}
