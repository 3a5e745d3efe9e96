import Dispatch
import Foundation

/// One SQLite database holding a model's tables, plus the writer that saves commits into it.
///
/// Writes go through one writer connection on a serial queue; commits that arrive while it is
/// busy are written together in one transaction (group commit), each in its own savepoint so
/// that one failing commit fails alone. Until a commit is written it sits in the `Overlay`,
/// which every read merges in, so a commit is visible to all contexts as soon as it is handed
/// over. File stores read through a small pool of reader connections (WAL: readers never wait
/// for the writer); in-memory stores share one connection.
final class Store: Sendable {
    let graph: ModelGraph
    /// The file, or `nil` for an in-memory store.
    let url: URL?
    let writer: Locked<WriterState>
    private let readers: Locked<[Connection]>
    let state = Locked(State())
    private let keys = Locked<[String: KeyBlock]>([:])
    let writeQueue = DispatchQueue(label: "ContextStack.Store.writer", qos: .utility)
    /// Whether commits are written by the background writer (a stack with a root) or on the
    /// committing thread (a stack without one).
    let writesInBackground: Bool
    /// Receives errors of background saves (set by the stack to forward to `onError`).
    let reportError: @Sendable (any Error) -> Void

    static let maximumIdleReaders = 4

    struct WriterState {
        let connection: Connection
        var insertSQL: [ObjectIdentifier: String] = [:]
        var updateSQL: [String: String] = [:]
    }

    struct State: Sendable {
        var overlay = Overlay()
        /// Views pinned by main contexts that do not merge, with their before-images.
        var pins: [UInt64: PinnedImages] = [:]
        var nextPin: UInt64 = 1
        /// Commits waiting for the writer; `claimed` ones have a caller waiting for their outcome.
        var queue: [QueueItem] = []
        var lastSequence: UInt64 = 0
        var writtenSequence: UInt64 = 0
        var isDraining = false
        var errors: [any Error] = []
        /// Why a commit failed, by sequence number, for `waitUntilWritten`.
        var failures: [UInt64: any Error] = [:]
        var waiters: [(sequence: UInt64, waiter: FlushWaiter)] = []
        /// How many SQLite transactions the writer has committed (group commit makes it fewer
        /// than the commits it wrote).
        var transactionCount = 0
        /// Unique values claimed by `fetchOrCreate`, with the ID of the object made for them.
        var claims: [Claim: ObjectID] = [:]
        var claimOrder: [Claim] = []
        /// What batch operations did, by sequence number, until their caller takes it.
        var batchResults: [UInt64: BatchResult] = [:]
    }

    private struct KeyBlock: Sendable {
        var next: Int64
        var limit: Int64
        var size: Int64
    }

    // MARK: - Opening

    /// Opens or creates the store at `url` (or in memory), creating the model's tables in a new
    /// file and checking the model of an existing one.
    init(graph: ModelGraph, url: URL?, resetOnFailure: Bool, writesInBackground: Bool,
         reportError: @escaping @Sendable (any Error) -> Void) throws {
        self.graph = graph
        self.url = url
        self.writesInBackground = writesInBackground
        self.reportError = reportError
        let connection: Connection
        if let url {
            connection = try Self.openFile(url, graph: graph, resetOnFailure: resetOnFailure)
        } else {
            connection = try Connection(path: ":memory:")
            try Self.prepareSchema(connection, graph: graph, resetOnFailure: resetOnFailure)
        }
        writer = Locked(WriterState(connection: connection))
        readers = Locked([])
    }

    private static func openFile(_ url: URL, graph: ModelGraph, resetOnFailure: Bool) throws -> Connection {
        let connection: Connection
        do {
            connection = try Connection(path: url.path)
        } catch {
            throw StoreError(.cannotOpen, "Cannot open or create the store at \(url.path).", underlying: error)
        }
        connection.setBusyTimeout(milliseconds: 10_000)
        do {
            let mode = try connection.scalar("PRAGMA journal_mode = WAL").stringValue
            if mode?.lowercased() != "wal" {
                throw StoreError(.cannotOpen, "The store at \(url.path) cannot use write-ahead logging (journal mode is \(mode ?? "unknown")).")
            }
            try connection.execute("PRAGMA synchronous = NORMAL")
        } catch let error as SQLiteError where error.code.primary == .notADatabase || error.code.primary == .corrupt {
            throw StoreError(.notADatabase, "The file at \(url.path) is not an SQLite database, or is damaged.", underlying: error)
        }
        try prepareSchema(connection, graph: graph, resetOnFailure: resetOnFailure)
        return connection
    }

    /// Creates the tables of a new store, or checks that an existing one holds this model.
    private static func prepareSchema(_ db: Connection, graph: ModelGraph, resetOnFailure: Bool) throws {
        try db.writeTransaction {
            let hasMetadata = try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'Z_METADATA'").int64Value == 1
            let tableCount = try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").int64Value ?? 0
            if !hasMetadata && tableCount > 0 {
                // Someone else's database: never adopt it, never drop its tables.
                throw StoreError(.foreignDatabase, "The file holds an SQLite database that ContextStack did not create (it has \(tableCount) tables and no Z_METADATA); choose another file.")
            }
            if hasMetadata {
                let storedHash = try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'hash'").stringValue
                if storedHash == graph.versionHash { return }
                guard resetOnFailure else {
                    throw StoreError(.modelMismatch, "The store was written by a different model (hash \(storedHash ?? "none"), this model \(graph.versionHash)); open it with the model that wrote it, or pass resetOnFailure: true to replace it with an empty store.")
                }
                // Drop every table of the old model (the file is ContextStack's): it starts empty.
                let tables = try db.rows("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
                for row in tables { if let name = row[0].stringValue { try db.execute("DROP TABLE \(name.quotedIdentifier)") } }
            }
            for statement in schemaStatements(graph) { try db.execute(statement) }
        }
    }

    static func schemaStatements(_ graph: ModelGraph) -> [String] {
        var statements = [
            "CREATE TABLE Z_METADATA (key TEXT PRIMARY KEY, value)",
            "CREATE TABLE Z_KEYS (name TEXT PRIMARY KEY, next INTEGER NOT NULL)",
        ]
        for table in graph.tables {
            var columns = ["\"Z_PK\" INTEGER PRIMARY KEY"]
            if table.hasEntityColumn { columns.append("\"Z_ENT\" INTEGER NOT NULL") }
            for column in table.columns {
                // Foreign keys are declared for the schema's readers; ContextStack keeps them
                // itself (delete rules), so SQLite's enforcement stays off.
                let reference = column.references.map { " REFERENCES \($0.quotedIdentifier) (\"Z_PK\")" } ?? ""
                columns.append("\(column.name.quotedIdentifier) \(column.type)\(reference)")
            }
            statements.append("CREATE TABLE \(table.quotedName) (\(columns.joined(separator: ", ")))")
            for column in table.columns where column.isIndexed {
                let name = "Z_\(table.name)_\(column.name)".quotedIdentifier
                statements.append("CREATE INDEX \(name) ON \(table.quotedName) (\(column.name.quotedIdentifier))")
            }
            statements += table.uniqueConstraints.map(\.createIndexSQL)
            statements.append("INSERT INTO Z_KEYS (name, next) VALUES ('\(table.name.replacingOccurrences(of: "'", with: "''"))', 1)")
        }
        for join in graph.joinTables {
            statements.append("CREATE TABLE \(join.quotedName) (source INTEGER NOT NULL, target INTEGER NOT NULL, PRIMARY KEY (source, target)) WITHOUT ROWID")
            statements.append("CREATE INDEX \("\(join.name)_target".quotedIdentifier) ON \(join.quotedName) (target)")
        }
        let schema = graph.schemaDescription.replacingOccurrences(of: "'", with: "''")
        statements.append("INSERT INTO Z_METADATA (key, value) VALUES ('hash', '\(graph.versionHash)'), ('schema', '\(schema)'), ('format', 1)")
        return statements
    }

    // MARK: - Keys

    /// A primary key for a new row of `root`'s table, never handed out before.
    ///
    /// Keys are reserved from the store in blocks (a write to `Z_KEYS`), so IDs are permanent
    /// from `create` on, and two processes sharing the file never collide.
    func reserveKey(for root: EntityDescription) throws -> Int64 {
        let name = root.name
        if let key = keys.withLock({ blocks -> Int64? in
            guard var block = blocks[name], block.next < block.limit else { return nil }
            defer { block.next += 1; blocks[name] = block }
            return block.next
        }) {
            return key
        }
        let size = keys.withLock { min(($0[name]?.size ?? 32) * 2, 8192) }
        let first = try writer.withLock { state -> Int64 in
            let db = state.connection
            return try db.writeTransaction {
                let next = try db.scalar("SELECT next FROM Z_KEYS WHERE name = ?", [.text(name)]).int64Value ?? 1
                // Keys in the table may be ahead of Z_KEYS when rows were written by other means.
                let floor = try db.scalar("SELECT coalesce(max(Z_PK), 0) + 1 FROM \(name.quotedIdentifier)").int64Value ?? 1
                let first = max(next, floor)
                try db.cachedStatement("UPDATE Z_KEYS SET next = ? WHERE name = ?").bindAndExecute([.integer(first + size), .text(name)])
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
    /// `whileLocked` runs under the lock that fixes the snapshot (main contexts take the
    /// commits handed to them there, so they apply exactly what the snapshot shows).
    func read<T>(pin: UInt64? = nil, whileLocked: () -> Void = {}, _ body: (ReadSession) throws -> T) throws -> T {
        if url == nil {
            return try writer.withLock { writerState in
                let (overlay, pinned) = state.withLock { state in
                    whileLocked()
                    return (state.overlay, pin.flatMap { state.pins[$0] })
                }
                return try body(ReadSession(store: self, db: writerState.connection, overlay: overlay, pinned: pinned))
            }
        }
        let db = try takeReader()
        defer { returnReader(db) }
        let (overlay, pinned) = try state.withLock { state -> (Overlay, PinnedImages?) in
            // Start the read transaction under the same lock the writer commits under.
            try db.execute("BEGIN DEFERRED")
            _ = try db.scalar("SELECT 1 FROM sqlite_master LIMIT 1")
            whileLocked()
            return (state.overlay, pin.flatMap { state.pins[$0] })
        }
        defer { if db.isInTransaction { try? db.execute("COMMIT") } }
        return try body(ReadSession(store: self, db: db, overlay: overlay, pinned: pinned))
    }

    /// Pins a view of the store as it is now: reads with the returned ID see every row as it
    /// was at this moment, whatever is committed later, until `unpin`.
    func pin() -> UInt64 {
        state.withLock { state in
            let id = state.nextPin
            state.nextPin += 1
            state.pins[id] = PinnedImages()
            return id
        }
    }

    /// How many write transactions the writer has run so far.
    var transactionCount: Int { state.withLock { $0.transactionCount } }

    func unpin(_ id: UInt64) {
        _ = state.withLock { $0.pins.removeValue(forKey: id) }
    }

    private func takeReader() throws -> Connection {
        if let db = readers.withLock({ $0.popLast() }) { return db }
        guard let url else { preconditionFailure("in-memory stores read through the writer connection") }
        let db = try Connection(path: url.path, readOnly: true)
        db.setBusyTimeout(milliseconds: 10_000)
        return db
    }

    private func returnReader(_ db: Connection) {
        readers.withLock { idle in
            if idle.count < Self.maximumIdleReaders { idle.append(db) }
        }
    }

    // MARK: - Flushing

    /// Waits until every commit handed over before the call is in SQLite, then throws the
    /// first error of a failed background save since the last flush, if any.
    func flush() async throws {
        let waiter = FlushWaiter()
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            waiter.setContinuation(continuation)
            register(waiter, upTo: nil)
        }
    }

    /// Blocks until every commit handed over before the call is written (or failed), without
    /// taking background errors from `flush()`.
    func waitUntilQueuedWritten() throws {
        let last = state.withLock { $0.lastSequence }
        let waiter = FlushWaiter(reporting: .nothing)
        register(waiter, upTo: last)
        try waiter.wait()
    }

    /// Blocks until every commit handed over before the call is in SQLite; see `flush()`.
    func flushAndWait() throws {
        let waiter = FlushWaiter()
        register(waiter, upTo: nil)
        try waiter.wait()
    }

    /// Waits until the commit with `sequence` is in SQLite; throws if saving it failed.
    func waitUntilWritten(_ sequence: UInt64) async throws {
        let waiter = FlushWaiter(sequence: sequence)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            waiter.setContinuation(continuation)
            register(waiter, upTo: sequence)
        }
    }

    func register(_ waiter: FlushWaiter, upTo sequence: UInt64?) {
        let ready = state.withLock { state -> Bool in
            let target = sequence ?? state.lastSequence
            if state.writtenSequence >= target { return true }
            state.waiters.append((target, waiter))
            return false
        }
        if ready { waiter.resume(store: self) }
    }

    /// Takes the errors of failed background saves, oldest first.
    fileprivate func takeErrors() -> [any Error] {
        state.withLock { state in
            defer { state.errors.removeAll() }
            return state.errors
        }
    }

    /// Why the commit with `sequence` failed to save, if it did.
    fileprivate func takeFailure(_ sequence: UInt64) -> (any Error)? {
        state.withLock { $0.failures.removeValue(forKey: sequence) }
    }

    /// A waiter for `flush`, resumed by the writer once its sequence is written.
    final class FlushWaiter: Sendable {
        private let continuation = Locked<CheckedContinuation<Void, any Error>?>(nil)
        private let semaphore = DispatchSemaphore(value: 0)
        private let outcome = Locked<(any Error)?>(nil)
        /// What the waiter throws once resumed.
        enum Reporting: Sendable {
            /// The first background error since the last flush (`flush()`).
            case backgroundErrors
            /// The failure of this commit, if it failed (a caller waiting for its own commit).
            case failure(of: UInt64)
            /// Nothing: the caller only waits.
            case nothing
        }

        private let reporting: Reporting

        init(sequence: UInt64) { self.reporting = .failure(of: sequence) }
        init(reporting: Reporting = .backgroundErrors) { self.reporting = reporting }

        func setContinuation(_ continuation: CheckedContinuation<Void, any Error>) {
            self.continuation.withLock { $0 = continuation }
        }

        func resume(store: Store) {
            let error: (any Error)?
            switch reporting {
            case .failure(let sequence): error = store.takeFailure(sequence)
            case .backgroundErrors: error = store.takeErrors().first
            case .nothing: error = nil
            }
            outcome.withLock { $0 = error }
            if let continuation = continuation.withLock({ $0.take() }) {
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
            semaphore.signal()
        }

        func wait() throws {
            semaphore.wait()
            if let error = outcome.withLock({ $0 }) { throw error }
        }
    }
}

/// A read in progress: one connection, in one read transaction, and the overlay that goes with it.
struct ReadSession {
    let store: Store
    let db: Connection
    let overlay: Overlay
    /// The before-images of a pinned view, for reads that must not see later commits.
    var pinned: PinnedImages?
}

extension Statement {
    /// Binds `values` to parameters 1, 2, … and runs the statement.
    func bindAndExecute(_ values: [Value]) throws(SQLiteError) {
        try bind(values)
        try execute()
    }
}
