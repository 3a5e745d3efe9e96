import _ContextStackCore
import _ContextStackModel
import _ContextStackPostgres

// `fetchOrCreate` across processes and machines, at the moment of writing.
//
// When a commit is handed over, an object a `fetchOrCreate` made whose unique values another
// process already saved is merged into the saved row (`QueuedStore.adoptSavedRows`). Another
// process may still save them between that check and this writer's turn, so the writer looks
// again, with the rows locked, just before it inserts such objects; and a row the other process
// is inserting at the same moment is found by waiting for it: the insert fails on the unique
// index once the other transaction commits, and the commit is tried again from a savepoint,
// when that row is visible. The receivers that were told of the new object learn that it is
// gone and the saved one changed (`WrittenItem.rewritten`).

extension PostgresStore {
    /// Writes `changes`, adopting rows other processes saved with the unique values of the
    /// objects `fetchOrCreate` made; says how it was written.
    func writeClaiming(_ changes: ChangeSet, on connection: PostgresConnection) throws -> WrittenItem {
        guard changes.inserts.contains(where: { changes.upserts[$0.id] != nil && !$0.row.entity.uniqueConstraints.isEmpty }) else {
            try PostgresWriter.apply(changes, on: connection)
            return .asQueued
        }
        try connection.execute("SAVEPOINT claimed")
        var attempt = 0
        while true {
            do {
                var reader = RowReader(stored: connection, graph: graph)
                let written: WrittenItem
                if let adoption = try Self.adoptSavedRows(changes, reader: &reader, locking: true) {
                    try PostgresWriter.apply(adoption.saved, on: connection)
                    written = .rewritten(saved: adoption.saved, correction: adoption.correction, merged: adoption.merged)
                } else {
                    try PostgresWriter.apply(changes, on: connection)
                    written = .asQueued
                }
                try connection.execute("RELEASE SAVEPOINT claimed")
                return written
            } catch let error as PostgresError where error.code == .uniqueViolation && attempt < 2 {
                // Another transaction saved the values between the look and the insert: its
                // row is visible now.
                attempt += 1
                try connection.execute("ROLLBACK TO SAVEPOINT claimed")
            }
        }
    }
}
