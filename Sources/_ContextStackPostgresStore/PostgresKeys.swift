import _ContextStackCore
import _ContextStackModel
import _ContextStackPostgres

/// Primary keys for new rows, reserved from each table's sequence in blocks, so that `create`
/// makes no round trip per object and IDs are permanent from the start — across every process
/// and machine that shares the database.
///
/// A block is `n` calls of `nextval` in one statement. A sequence never hands a value out
/// twice, whatever the transactions around it do (`nextval` is not rolled back), so two
/// processes never get the same key; their blocks may interleave, which is why a block is a
/// list of keys rather than a range. Blocks double from 32 up to 8,192 keys as a table's
/// inserts go on, as on SQLite; the keys a process reserved and did not use are skipped,
/// never reused.
package final class PostgresKeys: Sendable {
    private struct Block {
        var keys: [Int64] = []
        var next = 0
        var size = 16
    }

    private let blocks = Locked<[String: Block]>([:])

    package init() {}

    /// A key for a new row of `table`, never handed out before; reads a new block with
    /// `connection` when the table's block is used up.
    package func reserveKey(for table: Table, connection: () throws -> PostgresConnection) throws -> Int64 {
        if let key = blocks.withLock({ blocks -> Int64? in
            guard var block = blocks[table.name], block.next < block.keys.count else { return nil }
            defer { block.next += 1; blocks[table.name] = block }
            return block.keys[block.next]
        }) {
            return key
        }
        let size = blocks.withLock { min(($0[table.name]?.size ?? 16) * 2, 8192) }
        var keys: [Int64] = []
        keys.reserveCapacity(size)
        try connection().query("SELECT nextval(?::regclass) FROM generate_series(1, ?)",
                               [.text(StoreSchema.sequenceName(of: table).quotedIdentifier), .integer(Int64(size))]) { row in
            keys.append(row.int64(0))
        }
        precondition(keys.count == size, "The sequence of \(table.name) returned \(keys.count) keys for \(size): the database is not answering as PostgreSQL does.")
        return blocks.withLock { blocks in
            // Another thread may have reserved a block meanwhile; keys are never lost
            // track of, only skipped, so this block simply replaces it.
            blocks[table.name] = Block(keys: keys, next: 1, size: size)
            return keys[0]
        }
    }
}
