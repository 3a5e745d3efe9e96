import Dispatch
import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

// The SQLite side of the writer: the transaction, and the statements one commit becomes. The
// queue, group commit and the overlay are `QueuedStore`'s.

extension SQLiteStore {
    /// Runs `body` in one `BEGIN IMMEDIATE` transaction on the writer connection.
    package func writeTransaction(_ body: (inout WriterState) throws -> Void, commit: (() throws -> Void) throws -> Void) throws {
        try writer.withLock { writerState in
            try withoutActuallyEscaping(commit) { commit in
                try writerState.connection.writeTransaction({ try body(&writerState) }, commit: commit)
            }
        }
    }

    /// SQLite rolls a whole transaction back for some statement errors (`SQLITE_FULL`,
    /// `SQLITE_IOERR`, `RAISE(ROLLBACK)`): a group's `ROLLBACK TO` then fails.
    package var endsTransactionsForStatementErrors: Bool { true }

    /// A failed SQLite transaction is not stored: its `COMMIT` runs in this process.
    package func committedAfterAll(_ sequences: [UInt64], error: any Error) -> Bool { false }

    package func execute(_ sql: String, writer: inout WriterState) throws {
        try writer.connection.execute(sql)
    }

    /// Writes one queued commit, or runs one batch operation and returns what it did.
    ///
    /// A commit is written in `QueuedStore.writeCommit`'s frame (the merge policy applied
    /// again, the references kept whole). Objects a `fetchOrCreate` made are looked for once
    /// more inside the write transaction, which holds the file's write lock: another process
    /// (or stack) that saved their unique values after `commit()` checked is merged with as
    /// `commit()` would have (`QueuedStore.adoptSavedRows`), and the receivers get the
    /// correction.
    package func storedObjects(_ ids: [ObjectID], writer: inout WriterState) throws -> Set<ObjectID> {
        try storedObjects(ids, db: writer.connection)
    }

    package func writeItem(_ item: QueueItem, writer: inout WriterState) throws -> WrittenItem {
        // After the item's statements, which brought the connection's schema up to date.
        defer { if !tracksHistory { noticeHistoryTurnedOn(writer.connection) } }
        if let operation = item.batch { return .batch(try execute(operation, db: writer.connection)) }
        return try writeCommit(item, db: writer.connection) { changes in
            if changes.inserts.contains(where: { changes.upserts[$0.id] != nil && !$0.row.entity.uniqueConstraints.isEmpty }) {
                var reader = RowReader(stored: writer.connection, graph: graph)
                if let adoption = try Self.adoptSavedRows(changes, reader: &reader) {
                    try apply(adoption.saved, writer: &writer)
                    return .rewritten(saved: adoption.saved, correction: adoption.correction, merged: adoption.merged)
                }
            }
            try apply(changes, writer: &writer)
            return .asQueued
        }
    }

    /// Applies one commit with the writer connection, inside the caller's transaction.
    private func apply(_ changes: ChangeSet, writer: inout WriterState) throws {
        let db = writer.connection
        // A commit looks each statement up once (per entity, per set of changed slots), then
        // only binds and steps: hashing the SQL text for every row cost more than the row.
        var insertStatements: [ObjectIdentifier: Statement] = [:]
        var updateStatements: [UpdateShape: Statement] = [:]
        // Deletes first, so a value they free can be reused (SQLite checks unique indexes row
        // by row), then rows that trade unique values let go of theirs.
        for delete in changes.deletes {
            try db.cachedStatement(WriteSQL.delete(delete.entity)).bindAndExecute([.integer(delete.id.primaryKey)])
        }
        for (sql, arguments) in WriteSQL.uniqueReleases(changes.updates) {
            try db.cachedStatement(sql).bindAndExecute(arguments)
        }
        for update in changes.updates where !update.slots.isEmpty {
            let entity = update.entity
            let shape = UpdateShape(entity: ObjectIdentifier(entity), slots: update.slots)
            let statement: Statement
            if let known = updateStatements[shape] {
                statement = known
            } else {
                let names = update.slots.map { entity.properties[$0].name }
                let cacheKey = entity.table.name + "\u{0}" + names.joined(separator: "\u{0}")
                let sql = writer.updateSQL[cacheKey] ?? {
                    let sql = WriteSQL.update(entity, slots: update.slots)
                    writer.updateSQL[cacheKey] = sql
                    return sql
                }()
                statement = try db.cachedStatement(sql)
                updateStatements[shape] = statement
            }
            try statement.bind(update.values)
            try statement.bind(.integer(update.id.primaryKey), at: update.values.count + 1)
            try statement.execute()
        }
        for insert in changes.inserts {
            let entity = insert.row.entity
            let statement: Statement
            if let known = insertStatements[ObjectIdentifier(entity)] {
                statement = known
            } else {
                let sql = writer.insertSQL[ObjectIdentifier(entity)] ?? {
                    let sql = WriteSQL.insert(entity)
                    writer.insertSQL[ObjectIdentifier(entity)] = sql
                    return sql
                }()
                statement = try db.cachedStatement(sql)
                insertStatements[ObjectIdentifier(entity)] = statement
            }
            // Bound in place, in `WriteSQL.insertArguments`'s order, without building its
            // array: this loop runs once per inserted row.
            var index = 1
            try statement.bind(.integer(insert.id.primaryKey), at: index)
            index += 1
            if entity.table.hasEntityColumn {
                try statement.bind(.integer(entity.entityCode), at: index)
                index += 1
            }
            for slot in entity.storedSlots {
                try statement.bind(insert.row.values[slot], at: index)
                index += 1
            }
            try statement.execute()
        }
        for link in changes.links {
            let join = link.key.table.quotedIdentifier
            let sql = link.present
                ? "INSERT OR IGNORE INTO \(join) (source, target) VALUES (?, ?)"
                : "DELETE FROM \(join) WHERE source = ? AND target = ?"
            try db.cachedStatement(sql).bindAndExecute([.integer(link.key.source), .integer(link.key.target)])
        }
    }
}

/// The statement an update needs: its entity and the slots it changes.
private struct UpdateShape: Hashable {
    let entity: ObjectIdentifier
    let slots: [Int]
}

/// What batch operations need of the writer's connection besides reading.
extension Connection: StoreConnection {
    package func execute(_ sql: String, _ arguments: [Value]) throws {
        try cachedStatement(sql).bindAndExecute(arguments)
    }
}
