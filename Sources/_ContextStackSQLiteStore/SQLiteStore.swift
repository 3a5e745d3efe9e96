import Dispatch
import Foundation
import Synchronization
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// One SQLite database holding a model's tables, plus the writer that saves commits into it.
///
/// Writes go through one writer connection on a serial queue; commits that arrive while it is
/// busy are written together in one transaction (group commit), each in its own savepoint so
/// that one failing commit fails alone. Until a commit is written it sits in the `Overlay`,
/// which every read merges in, so a commit is visible to all contexts as soon as it is handed
/// over (one that waits to be written, once written: `QueueState.overlay`). File stores read through a small pool of reader connections (WAL: readers never wait
/// for the writer); in-memory stores share one connection.
package final class SQLiteStore: QueuedStore {
    package typealias Writer = WriterState

    package let graph: ModelGraph
    /// The databases the writer connection holds: the first store added is SQLite's `main`,
    /// later ones (other configurations) are attached to it.
    private let layout: Locked<Layout>
    /// Receives the SQL of every statement the store runs, while someone listens (`Stack.traceStatements`).
    let tracer: StatementTracer
    let writer: Locked<WriterState>
    private let readers: Locked<[Reader]>
    package let state = Locked(QueueState())
    package var dialect: any SQLDialect { SQLiteDialect() }
    private let keys = Locked<[String: KeyBlock]>([:])
    package let writeQueue = DispatchQueue(label: "ContextStack.SQLiteStore.writer", qos: .utility)
    package let waiterRegistrations = DispatchQueue(label: "ContextStack.SQLiteStore.waiter-registrations")
    /// Whether commits are written by the background writer (a stack with a root) or on the
    /// committing thread (a stack without one).
    package let writesInBackground: Bool
    /// Receives errors of background saves (set by the stack to forward to `onError`).
    package let reportError: @Sendable (any Error) -> Void

    static let maximumIdleReaders = 4

    /// Whether every save writes history (`Z_HISTORY`); see `SQLiteStore+History.swift`. Set
    /// at open, and by the writer when another stack turned history on for the file since
    /// (`noticeHistoryTurnedOn`).
    /// An atomic, not a lock: a save reads it twice.
    package var tracksHistory: Bool { historyTracked.load(ordering: .acquiring) }
    let historyTracked: Atomic<Bool>
    /// Names this store object in the history it writes, so its own watcher can tell its
    /// commits from other stacks' (other processes', or another stack's on the same file).
    let instance = UUID().uuidString
    /// The history watchers `followHistory` started.
    let watchers = Locked<[SQLiteHistoryWatcher]>([])

    package struct WriterState {
        let connection: Connection
        var insertSQL: [ObjectIdentifier: String] = [:]
        var updateSQL: [String: String] = [:]
    }

    /// One store of the stack: one configuration in one SQLite database.
    struct Part: Sendable {
        /// The database's name on the writer connection: `main`, or the name it is attached as.
        let database: String
        /// The file, or `nil` in memory.
        let url: URL?
        let schema: StoreSchema
    }

    private struct Layout: Sendable {
        var parts: [Part]
        /// The part that holds each table, by table name.
        var databaseOfTable: [String: String] = [:]
        /// Bumped when a part is attached: idle readers of an older generation lack it.
        var generation = 0

        init(_ part: Part) {
            parts = []
            add(part)
        }

        mutating func add(_ part: Part) {
            parts.append(part)
            for table in part.schema.tables { databaseOfTable[table.name] = part.database }
            generation += 1
            let files = parts.filter { $0.url != nil }
            writerSnapshotSQL = files.isEmpty ? nil : SQLiteStore.snapshotSQL(of: files)
        }

        /// Reads go through the writer when a part is in memory: other connections cannot see it.
        var readsThroughWriter: Bool { parts.contains { $0.url == nil } }

        /// For a read through the writer: what starts a snapshot of every file of the stack,
        /// read in one read transaction, since another process may commit to a file between two
        /// of the read's statements. `nil` when every part is in memory: only the writer's
        /// connection sees those, and the read holds it.
        private(set) var writerSnapshotSQL: String?
    }

    /// A reader connection, with every part attached as of `generation`.
    private struct Reader {
        let connection: Connection
        let generation: Int
        /// Reads one row of every database, so the read transaction holds a snapshot of each
        /// (SQLite starts an attached database's snapshot only when it is first read).
        let snapshotSQL: String
        /// Whether the stack keeps one file, so that a read's first statement takes the one
        /// snapshot it needs (with attached files, each would be taken when first read).
        let readsOneFile: Bool
    }

    private struct KeyBlock: Sendable {
        var next: Int64
        var limit: Int64
        var size: Int64
    }

    deinit {
        // Readers and history watchers close first, so the writer is the file's last
        // connection: closing it checkpoints the write-ahead log into the file and removes it
        // (a read-only connection closing last could not), and the file is left whole, as
        // another program expects.
        readers.withLock { $0.removeAll() }
        let following = watchers.withLock { list in defer { list.removeAll() }; return list }
        // A watcher's look holds the store, so the store may end right at the end of one, on
        // the watcher's queue, with the watcher (and its connection) held until the look
        // returns: the writer's connection is let go on that queue, after the watchers.
        if let last = following.last {
            last.letGo(following, thenClose: writer.withLock { $0.connection })
        }
    }

    // MARK: - Opening

    /// Opens or creates the store of `schema` at `url` (or in memory), creating its tables in a
    /// new file and checking, migrating or resetting an existing one as `options` say.
    package init(graph: ModelGraph, schema: StoreSchema, url: URL?, options: OpenOptions, writesInBackground: Bool,
         tracer: StatementTracer = StatementTracer(), reportError: @escaping @Sendable (any Error) -> Void) throws {
        self.graph = graph
        self.tracer = tracer
        self.writesInBackground = writesInBackground
        self.reportError = reportError
        let connection: Connection
        if let url {
            connection = try Self.openFile(url, schema: schema, options: options)
        } else {
            connection = try Connection(path: ":memory:")
            try connection.writeTransaction {
                for statement in schema.creationStatements() { try connection.execute(statement) }
            }
        }
        let tracks = try Self.prepareHistory(connection, enable: options.tracksHistory)
        historyTracked = Atomic(tracks)
        // What lets a save look for a history table only when the schema may have changed.
        if !tracks { connection.watchPreparations() }
        connection.install(tracer)
        writer = Locked(WriterState(connection: connection))
        readers = Locked([])
        layout = Locked(Layout(Part(database: "main", url: url, schema: schema)))
    }

    /// Adds the store of another configuration: its file (opened, checked and migrated on its
    /// own first) or a new in-memory database, attached to the writer connection.
    package func attach(schema: StoreSchema, url: URL?, options: OpenOptions) throws {
        // Refused before the file is opened: a file past the limit was created, its tables
        // made, and then refused by SQLite's ATTACH ("too many attached databases").
        let attachLimit = writer.withLock { $0.connection.attachLimit }
        guard parts.count <= attachLimit else {
            throw StoreError(.unsupported, "A stack holds at most \(attachLimit + 1) SQLite stores: this SQLite attaches at most \(attachLimit) databases to the first. Put several configurations' entities in one configuration, and so in one file.")
        }
        if tracksHistory || options.tracksHistory {
            // SQLite commits a transaction over attached files atomically only with a rollback
            // journal, never in WAL mode: a crash could keep a save without its history.
            throw StoreError(.unsupported, "History is tracked only by a stack with one SQLite store: a save over several files is not atomic in WAL mode, so a crash could separate a commit from its history. Keep the entities in one file (no configuration), or track history on none.")
        }
        if let url {
            // Prepared on a connection of its own, so migration works on plain table names;
            // closed before the writer attaches the file.
            let db = try Self.openFile(url, schema: schema, options: options)
            if try Self.prepareHistory(db, enable: false) {
                throw StoreError(.unsupported, "The file at \(url.path) tracks history, which only a stack with one SQLite store can do: a save over several files is not atomic in WAL mode. Add it as the stack's only store.")
            }
        }
        try writer.withLock { state in
            // Again under the writer's lock, in the file itself: another stack may have turned
            // history on since this one opened it, and this stack's writer notices only at its
            // next save (`noticeHistoryTurnedOn`), which it could never do with a second file.
            let db = state.connection
            if try tracksHistory || Self.prepareHistory(db, enable: false) {
                throw StoreError(.unsupported, "History is tracked only by a stack with one SQLite store, and another stack turned it on for this stack's first file since it was added: a save over several files is not atomic in WAL mode. Keep the entities in one file (no configuration), or track history on none.")
            }
            let database = layout.withLock { "s\($0.parts.count)" }
            let attach = try db.cachedStatement("ATTACH DATABASE ? AS \(database.quotedIdentifier)")
            defer { attach.reset() }
            try attach.bindAndExecute([.text(url?.path ?? ":memory:")])
            if url != nil {
                try db.execute("PRAGMA \(database.quotedIdentifier).synchronous = NORMAL")
            } else {
                try db.writeTransaction {
                    for statement in schema.creationStatements(in: database) { try db.execute(statement) }
                }
            }
            layout.withLock { $0.add(Part(database: database, url: url, schema: schema)) }
        }
        readers.withLock { $0.removeAll() }
    }

    /// The stores of this stack, first added first.
    var parts: [Part] { layout.withLock { $0.parts } }

    // MARK: - Keys

    /// A primary key for a new row of `root`'s table, never handed out before.
    ///
    /// Keys are reserved from the store in blocks (a write to `Z_KEYS`), so IDs are permanent
    /// from `create` on, and two processes sharing the file never collide.
    package func reserveKey(for root: EntityDescription) throws -> Int64 {
        let name = root.name
        if let key = keys.withLock({ blocks -> Int64? in
            guard var block = blocks[name], block.next < block.limit else { return nil }
            defer { block.next += 1; blocks[name] = block }
            return block.next
        }) {
            return key
        }
        let size = keys.withLock { min(($0[name]?.size ?? 32) * 2, 8192) }
        guard let database = layout.withLock({ $0.databaseOfTable[name] }) else {
            preconditionFailure("\(name) is in no store of this stack: add a store for a configuration that holds it (addDatabaseStore(at:configuration:) or addInMemoryStore(configuration:)) before creating its objects.")
        }
        let keysTable = "\(database.quotedIdentifier).Z_KEYS"
        let first = try writer.withLock { state -> Int64 in
            let db = state.connection
            return try db.writeTransaction {
                let next = try db.scalar("SELECT next FROM \(keysTable) WHERE name = ?", [.text(name)]).int64Value ?? 1
                // Keys in the table may be ahead of Z_KEYS when rows were written by other means.
                let floor = try db.scalar("SELECT coalesce(max(Z_PK), 0) + 1 FROM \(name.quotedIdentifier)").int64Value ?? 1
                let first = max(next, floor)
                try db.cachedStatement("UPDATE \(keysTable) SET next = ? WHERE name = ?").bindAndExecute([.integer(first + size), .text(name)])
                return first
            }
        }
        return keys.withLock { blocks in
            blocks[name] = KeyBlock(next: first + 1, limit: first + size, size: size)
            return first
        }
    }

    // MARK: - Reading

    /// Runs `body` with a reader connection and the overlay, taken so that the overlay holds
    /// exactly what the connection's snapshot lacks: every commit is seen wholly or not at all.
    ///
    /// With `pin`, the session also carries the before-images of that pinned view.
    /// `whileLocked` runs under the lock the writer commits under (main contexts take the
    /// commits handed to them there, so they apply exactly what the snapshot shows).
    ///
    /// The snapshot must match what was taken under that lock. It is taken there (`BEGIN` and
    /// a `SELECT` that pins it) only when it must be: with a pinned view, or a stack of several
    /// files. Otherwise the read's own first statement takes it, outside the lock:
    /// - With nothing to keep in step — no overlay that it must lack exactly, no handed-over
    ///   commits to catch up with — any later snapshot is as right as one taken under the lock
    ///   (a commit that lands before it could as well have landed before the lock was taken).
    /// - Otherwise the lock's `writeEpoch` is noted, and checked again after the first step of
    ///   the read's first statement (`Connection.snapshotCheck`), before any row is used.
    ///   Unchanged, nothing was written in between, so the snapshot is the one the lock would
    ///   have given. Changed, the statement is abandoned and the read runs again with its
    ///   snapshot taken under the lock. What the first attempt did stays right: it applied
    ///   commits handed over up to the lock, and objects it made hold rows of that moment;
    ///   the second attempt applies the commits after it.
    ///
    /// A read of one statement (`ReadShape.isOneStatement`, with an empty overlay) then needs no transaction
    /// at all (SQLite's autocommit); others share the first statement's snapshot in a deferred
    /// transaction. As on PostgreSQL (`PostgresStore.withReadSession`).
    ///
    /// A read of rows by their keys (`ReadShape.byKeys`) runs on the writer's connection when
    /// no write holds it (`readOnIdleWriter`), and on a reader otherwise.
    package func withReadSession(pin: UInt64?, whileLocked: (() -> Void)?, shape: ReadShape, _ body: (ReadSession) throws -> Void) throws {
        let (throughWriter, oneFile) = layout.withLock { ($0.readsThroughWriter, $0.parts.count == 1) }
        if shape == .byKeys && pin == nil && oneFile, try readOnIdleWriter(whileLocked: whileLocked, body) {
            return
        }
        if throughWriter {
            return try writer.withLock { writerState in
                try readingOnWriter(writerState.connection) {
                    let (overlay, pinned) = state.withLock { state in
                        whileLocked?()
                        return (state.overlay(forPin: pin), pin.flatMap { state.pins[$0] })
                    }
                    try body(ReadSession(graph: graph, connection: writerState.connection, overlay: overlay, pinned: pinned))
                }
            }
        }
        let reader = try takeReader()
        defer { finishReading(reader) }
        try readTwice { underLock in
            try read(on: reader, pin: pin, whileLocked: whileLocked, oneStatement: shape.isOneStatement, underLock: underLock, body)
        }
    }

    /// A read by keys on the writer's connection, when no write holds the connection and nothing
    /// is queued for it; `nil` otherwise (the read then takes a reader). A reader connection's
    /// page cache is stale after every write of the writer's (SQLite keeps one cache per
    /// connection), so a read-modify-write that read on a reader read the table's pages back
    /// from the file each time — three `pread`s a commit that a program using one connection
    /// does not make (`strace -c` of save1, 2026-11-27).
    ///
    /// The read holds the writer's lock, so a commit that comes meanwhile waits for it: one
    /// statement, an index probe per key, which is why only reads by keys come here. Its own
    /// statement takes its snapshot, and none needs checking: no commit of this process can be
    /// written while the read holds the writer, and with nothing queued there is no overlay to
    /// keep in step with.
    /// - Returns: whether it read.
    private func readOnIdleWriter(whileLocked: (() -> Void)?, _ body: (ReadSession) throws -> Void) throws -> Bool {
        try writer.withLockIfAvailable { writerState -> Bool in
            let db = writerState.connection
            guard !db.isInTransaction else { return false }
            let overlay = state.withLock { state -> Overlay? in
                guard state.nothingToWrite else { return nil }
                whileLocked?()
                return state.overlay
            }
            guard let overlay else { return false }
            try body(ReadSession(graph: graph, connection: db, overlay: overlay, pinned: nil))
            return true
        } ?? false
    }

    /// One attempt of a read on `reader`; `false` when its snapshot turned out not to be the one
    /// it needed (it does not stand). `underLock` takes the snapshot under the lock whatever
    /// the read needs.
    private func read(on reader: Reader, pin: UInt64?, whileLocked: (() -> Void)?, oneStatement: Bool, underLock: Bool,
                      _ body: (ReadSession) throws -> Void) throws -> Bool {
        let db = reader.connection
        // After an attempt whose snapshot moved: its read transaction, if it had one, ends.
        if underLock && db.isInTransaction { try db.execute("COMMIT") }
        let (overlay, pinned, start) = try state.withLock { state -> (Overlay, PinnedImages?, SnapshotStart) in
            if pin == nil && reader.readsOneFile && !underLock {
                if whileLocked == nil && state.overlay.isEmpty { return (state.overlay, nil, .anyLater) }
                // A snapshot the read's first statement takes: several statements share it in
                // a transaction, one statement needs none (SQLite's autocommit). `BEGIN
                // DEFERRED` takes no lock of SQLite's; it runs before `whileLocked`, so that a
                // read that fails here has not taken the commits handed over.
                if !(oneStatement && state.overlay.isEmpty) { try db.execute("BEGIN DEFERRED") }
                whileLocked?()
                return (state.overlay, nil, .checked(epoch: state.writeEpoch))
            }
            // Start the read transaction under the same lock the writer commits under.
            try db.execute("BEGIN DEFERRED")
            _ = try db.scalar(reader.snapshotSQL)
            whileLocked?()
            return (state.overlay(forPin: pin), pin.flatMap { state.pins[$0] }, .taken)
        }
        if start == .anyLater && !oneStatement { try db.execute("BEGIN DEFERRED") }
        db.snapshotMoved = false
        if case .checked(let epoch) = start { db.snapshotCheck = snapshotUnchanged(since: epoch) }
        defer { db.snapshotCheck = nil }
        do {
            try body(ReadSession(graph: graph, connection: db, overlay: overlay, pinned: pinned))
            return !db.snapshotMoved
        } catch where db.snapshotMoved {
            return false
        }
    }

    private enum SnapshotStart: Equatable {
        /// Under the store's lock.
        case taken
        /// By the read's first statement, whenever it runs.
        case anyLater
        /// By the read's first statement, if nothing was written since `epoch`.
        case checked(epoch: UInt64)
    }

    /// Runs `body` under the state lock with a reader that sees exactly what is committed now:
    /// a reader connection whose snapshot starts under that lock, plus the overlay. Nothing can
    /// be written or queued meanwhile, so a commit checked in `body` can be queued in it too.
    /// A file store's writer is not taken, so this never waits for a transaction the writer
    /// is running; an in-memory store reads through the writer (lock order: writer, state).
    package func withCommittedView<T>(_ body: (inout QueueState, inout RowReader) throws -> T) throws -> T {
        if layout.withLock({ $0.readsThroughWriter }) {
            return try writer.withLock { writerState in
                let db = writerState.connection
                return try readingOnWriter(db) {
                    try state.withLock { state in
                        var reader = RowReader(session: ReadSession(graph: graph, connection: db, overlay: state.queued), context: nil)
                        return try body(&state, &reader)
                    }
                }
            }
        }
        let connection = try takeReader()
        defer { finishReading(connection) }
        let db = connection.connection
        return try state.withLock { state in
            try db.execute("BEGIN DEFERRED")
            _ = try db.scalar(connection.snapshotSQL)
            var reader = RowReader(session: ReadSession(graph: graph, connection: db, overlay: state.queued), context: nil)
            return try body(&state, &reader)
        }
    }

    /// Runs `read` on the writer's connection (held by the caller) in one read transaction
    /// whose snapshot covers every file of the stack (`Layout.writerSnapshotSQL`); a stack of
    /// in-memory databases alone reads without one. Outside a transaction, each statement
    /// would see the files as of its own start, and a read of several statements could see
    /// half of another process's commit.
    private func readingOnWriter<T>(_ db: Connection, _ read: () throws -> T) throws -> T {
        guard let snapshot = layout.withLock({ $0.writerSnapshotSQL }) else { return try read() }
        return try db.readTransaction {
            _ = try db.scalar(snapshot)
            return try read()
        }
    }

    private func takeReader() throws -> Reader {
        if let reader = readers.withLock({ $0.popLast() }) { return reader }
        let (parts, generation) = layout.withLock { ($0.parts, $0.generation) }
        guard let main = parts.first?.url else { preconditionFailure("in-memory stores read through the writer connection") }
        let db = try Connection(path: main.path, readOnly: true)
        db.setBusyTimeout(milliseconds: Self.busyTimeout)
        for part in parts.dropFirst() {
            guard let url = part.url else { preconditionFailure("stores with an in-memory part read through the writer connection") }
            // Attached with the reader's own read-only flags.
            let attach = try db.cachedStatement("ATTACH DATABASE ? AS \(part.database.quotedIdentifier)")
            defer { attach.reset() }
            try attach.bindAndExecute([.text(url.path)])
        }
        db.install(tracer)
        return Reader(connection: db, generation: generation, snapshotSQL: Self.snapshotSQL(of: parts), readsOneFile: parts.count == 1)
    }

    /// Reads one row of each of `parts`' databases, so that a read transaction holds a
    /// snapshot of each (SQLite starts an attached database's snapshot only when it is first
    /// read).
    static func snapshotSQL(of parts: [Part]) -> String {
        parts.count == 1 && parts[0].database == "main"
            ? "SELECT 1 FROM sqlite_master LIMIT 1"
            : "SELECT " + parts.map { "(SELECT 1 FROM \($0.database.quotedIdentifier).sqlite_master LIMIT 1)" }.joined(separator: ", ")
    }

    /// Ends `reader`'s read transaction and puts it back in the pool.
    ///
    /// What the read returned stays whole whatever happens here: it came from one snapshot,
    /// and ending a read-only transaction changes nothing in the file. The danger is reuse: a
    /// reader whose `COMMIT` failed may still be inside its transaction, and the next read
    /// would see its old snapshot. Such a reader is closed instead (closing rolls its
    /// transaction back), and the error goes to `stack.onError`; the read's caller, whose
    /// result is good — or whose commit was already queued inside the read — is not told
    /// otherwise.
    private func finishReading(_ reader: Reader) {
        let db = reader.connection
        if db.isInTransaction {
            do {
                try db.execute("COMMIT")
            } catch {
                reportError(error)
                return
            }
        }
        returnReader(reader)
    }

    private func returnReader(_ reader: Reader) {
        let current = layout.withLock { $0.generation }
        guard reader.generation == current else { return }
        readers.withLock { idle in
            if idle.count < Self.maximumIdleReaders { idle.append(reader) }
        }
    }
}

extension Statement {
    /// Binds `values` to parameters 1, 2, … and runs the statement.
    func bindAndExecute(_ values: [Value]) throws(SQLiteError) {
        try bind(values)
        try execute()
    }
}
