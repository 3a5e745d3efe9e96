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
            try connection.commit()
        } catch {
            if connection.isInTransaction && !connection.isBroken { try? connection.execute("ROLLBACK") }
            throw error
        }
    }

    /// Writes one change set inside the caller's transaction. Its statements are queued
    /// (`PostgresConnection.enqueue`): their errors are thrown by the connection's next use or
    /// by `commit()`, and a transaction of them alone is one round trip with its `COMMIT`.
    package static func apply(_ changes: ChangeSet, on connection: PostgresConnection) throws {
        // Deletes first, so a value they free can be reused; PostgreSQL checks unique indexes
        // row by row, as SQLite does.
        for delete in changes.deletes {
            try connection.enqueue(WriteSQL.delete(delete.entity), [.integer(delete.id.primaryKey)])
        }
        for (sql, arguments) in WriteSQL.uniqueReleases(changes.updates) { try connection.enqueue(sql, arguments) }
        for update in changes.updates where !update.slots.isEmpty {
            try connection.enqueue(WriteSQL.update(update.entity, slots: update.slots, alsoSet: PostgresDialect().rowVersionAssignments),
                                   update.values + [.integer(update.id.primaryKey)])
        }
        try insertRows(changes.inserts, on: connection)
        for link in changes.links {
            let join = link.key.table.quotedIdentifier
            let sql = link.present
                ? "INSERT INTO \(join) (source, target) VALUES (?, ?) ON CONFLICT DO NOTHING"
                : "DELETE FROM \(join) WHERE source = ? AND target = ?"
            try connection.enqueue(sql, [.integer(link.key.source), .integer(link.key.target)])
        }
    }

    /// How many rows one INSERT carries at most, largest first: a run of inserts of one entity
    /// goes out in as few statements as these sizes allow (a round trip each, where one per row
    /// made a 100,000-object commit wait on 100,000 answers), and the few sizes keep the
    /// prepared-statement cache small. PostgreSQL binds at most 65,535 values per statement.
    static let insertBatchSizes = [512, 64, 8, 1]

    /// Inserts rows, runs of one entity together (in their order: a commit's rows keep the
    /// order they were made in).
    static func insertRows(_ inserts: [(id: ObjectID, row: ObjectRow)], on connection: PostgresConnection) throws {
        var start = 0
        while start < inserts.count {
            let entity = inserts[start].row.entity
            var end = start + 1
            while end < inserts.count && inserts[end].row.entity === entity { end += 1 }
            let width = entity.storedSlots.count + (entity.table.hasEntityColumn ? 2 : 1)
            var next = start
            while next < end {
                let size = insertBatchSizes.first { $0 <= end - next && $0 * width <= 65_535 } ?? 1
                var arguments: [Value] = []
                arguments.reserveCapacity(size * width)
                for insert in inserts[next..<(next + size)] { arguments += WriteSQL.insertArguments(insert.id, insert.row) }
                try connection.enqueue(WriteSQL.insert(entity, rows: size), arguments)
                next += size
            }
            start = end
        }
    }
}
