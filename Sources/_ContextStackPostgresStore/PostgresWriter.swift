import _ContextStackCore
import _ContextStackModel
import _ContextStackPostgres

/// Writes change sets into the PostgreSQL store's tables: the same rows, in the same order, as
/// `SQLiteStore`'s writer, plus the row version.
///
/// Every update adds one to the row's `Z_VERSION` (new rows start at 1), so another process
/// or machine can tell that a row changed since it read it. Deciding what to write when rows
/// changed underneath a commit (the merge policy) happens before, on what is committed; this
/// type only writes the resolved change set.
package enum PostgresWriter {
    /// Saves change sets in one transaction on `connection` (group commit): all of them or,
    /// when any statement fails, none.
    /// - Throws: the first `PostgresError`; the transaction is rolled back.
    package static func save(_ changeSets: [ChangeSet], on connection: PostgresConnection) throws {
        precondition(!connection.isInTransaction, "Save on a connection outside any transaction: a save is one transaction of its own.")
        try connection.execute("BEGIN")
        do {
            for changes in changeSets { try apply(changes, on: connection) }
            try connection.execute("COMMIT")
        } catch {
            if connection.isInTransaction && !connection.isBroken { try? connection.execute("ROLLBACK") }
            throw error
        }
    }

    /// Writes one change set inside the caller's transaction.
    package static func apply(_ changes: ChangeSet, on connection: PostgresConnection) throws {
        for delete in changes.deletes {
            let table = delete.entity.table!
            try connection.run("DELETE FROM \(table.quotedName) WHERE \"Z_PK\" = ?", [.integer(delete.id.primaryKey)])
            for property in delete.entity.properties where property.storage == .joinTable {
                guard let join = property.joinTable else { continue }
                try connection.run("DELETE FROM \(join.quotedName) WHERE \(property.joinColumns.mine) = ?", [.integer(delete.id.primaryKey)])
            }
        }
        // Unique indexes are checked row by row, as on SQLite: rows of the commit that trade
        // unique values let go of theirs first.
        let trading = changes.updates.filter { $0.slots.contains(where: $0.entity.uniqueSlots.contains) }
        if trading.count > 1 {
            for update in trading {
                let columns = update.slots.filter(update.entity.uniqueSlots.contains).map { "\(update.entity.properties[$0].name.quotedIdentifier) = NULL" }
                try connection.run("UPDATE \(update.entity.table.quotedName) SET \(columns.joined(separator: ", ")) WHERE \"Z_PK\" = ?",
                                   [.integer(update.id.primaryKey)])
            }
        }
        for update in changes.updates where !update.slots.isEmpty {
            let entity = update.entity
            let assignments = update.slots.map { "\(entity.properties[$0].name.quotedIdentifier) = ?" } + ["\"Z_VERSION\" = \"Z_VERSION\" + 1"]
            try connection.run("UPDATE \(entity.table.quotedName) SET \(assignments.joined(separator: ", ")) WHERE \"Z_PK\" = ?",
                               update.values + [.integer(update.id.primaryKey)])
        }
        for insert in changes.inserts {
            let entity = insert.row.entity
            let table = entity.table!
            var columns = ["\"Z_PK\""]
            var values: [Value] = [.integer(insert.id.primaryKey)]
            if table.hasEntityColumn {
                columns.append("\"Z_ENT\"")
                values.append(.integer(entity.entityCode))
            }
            for slot in entity.storedSlots {
                columns.append(entity.properties[slot].name.quotedIdentifier)
                values.append(insert.row.values[slot])
            }
            let placeholders = Array(repeating: "?", count: columns.count).joined(separator: ", ")
            try connection.run("INSERT INTO \(table.quotedName) (\(columns.joined(separator: ", "))) VALUES (\(placeholders))", values)
        }
        for link in changes.links {
            let join = link.key.table.quotedIdentifier
            let sql = link.present
                ? "INSERT INTO \(join) (source, target) VALUES (?, ?) ON CONFLICT DO NOTHING"
                : "DELETE FROM \(join) WHERE source = ? AND target = ?"
            try connection.run(sql, [.integer(link.key.source), .integer(link.key.target)])
        }
    }
}
