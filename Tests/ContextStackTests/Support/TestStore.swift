@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
@testable import _ContextStackPostgres
@testable import _ContextStackPostgresStore
import ContextStackPostgres
import Synchronization
import Foundation

/// Where a test's store lives.
enum StoreKind: String, CaseIterable, CustomStringConvertible, Sendable {
    /// An SQLite file in a temporary folder.
    case file
    /// An SQLite database in memory.
    case memory
    /// A database of its own on the test PostgreSQL server (`PostgresServer`).
    case postgres

    var description: String { rawValue }

    /// The kinds this machine can run: PostgreSQL only when a server is available (otherwise
    /// its suites are skipped with the one line `PostgresServer` prints).
    static let available: [StoreKind] = allCases.filter { $0 != .postgres || PostgresServer.isAvailable }
}

/// A fresh store for one test: a temporary file (removed afterwards) or memory.
final class TestStore: Sendable {
    let stack: Stack
    let directory: URL?
    let url: URL?
    /// The test's own PostgreSQL database, dropped with the store.
    let database: TestSchema?

    /// `tracksHistory`: `nil` for the store's default (off on SQLite, on on PostgreSQL).
    /// `model`, when given, instead of a model of `types`.
    init(_ kind: StoreKind, rootContext: Stack.RootContext = .shared, types: [ManagedObject.Type] = fullModelTypes,
         model: Model? = nil, tracksHistory: Bool? = nil) throws {
        // Every context of the tests checks its object graph after each commit it makes or takes.
        ContextCore.checksInvariants.store(true, ordering: .relaxed)
        stack = try Stack(model: model ?? Model(types), rootContext: rootContext)
        switch kind {
        case .file:
            let directory = try makeTemporaryDirectory()
            let url = directory.appendingPathComponent("store.sqlite")
            try stack.addDatabaseStore(at: url, tracksHistory: tracksHistory ?? false)
            self.directory = directory
            self.url = url
            database = nil
        case .memory:
            try stack.addInMemoryStore()
            directory = nil
            url = nil
            database = nil
        case .postgres:
            let database = try TestSchema()
            try stack.addPostgresStore(url: database.url, tracksHistory: tracksHistory ?? true)
            directory = nil
            url = nil
            self.database = database
        }
    }

    /// A stack whose stores `setup` adds (several stores, configurations), given a fresh
    /// temporary directory for their files (removed afterwards).
    /// `schema`, if given, is dropped with the store.
    init(rootContext: Stack.RootContext = .shared, model: Model, schema: TestSchema? = nil, setup: (Stack, URL) throws -> Void) throws {
        stack = try Stack(model: model, rootContext: rootContext)
        let directory = try makeTemporaryDirectory()
        self.directory = directory
        url = nil
        database = schema
        try setup(stack, directory)
    }

    /// A second stack on the same file, as a later run of the program would open it.
    func reopen(types: [ManagedObject.Type] = fullModelTypes) throws -> Stack {
        try stack.flushAndWait()
        let stack = try Stack(model: Model(types))
        if let database {
            try stack.addPostgresStore(url: database.url)
        } else {
            guard let url else { preconditionFailure("only file and PostgreSQL stores reopen") }
            try stack.addDatabaseStore(at: url)
        }
        return stack
    }

    /// A raw SQLite connection to the file, to check what is really stored. It waits, as the
    /// store's own connections do, when SQLite answers `SQLITE_BUSY`: a reader can get that in
    /// WAL mode while another connection changes the WAL index, and a writer while the store's
    /// writer holds the lock.
    func rawConnection() throws -> Connection {
        guard let url else { preconditionFailure("only file stores have a file") }
        let connection = try Connection(path: url.path)
        connection.setBusyTimeout(milliseconds: 10_000)
        return connection
    }

    /// What is really written, whatever the kind of store: a raw connection to the file, or
    /// the writer's own connection to the in-memory database (the overlay of commits not yet
    /// written is not consulted).
    func written<T>(_ body: (Connection) throws -> T) throws -> T {
        if url != nil { return try body(rawConnection()) }
        return try stack.sqliteStore.writer.withLock { try body($0.connection) }
    }

    /// The first column of the first row of `sql`, as written (see `written`; on PostgreSQL,
    /// through a connection of its own).
    func writtenScalar(_ sql: String) throws -> Value { try writtenRows(sql).first?.first ?? .null }

    /// Every row of `sql`, as written (see `written`; on PostgreSQL, through a connection of its
    /// own). Name tables and columns in double quotes: PostgreSQL folds bare names to lower case.
    func writtenRows(_ sql: String) throws -> [[Value]] {
        if let database { return try PostgresConnection(PostgresSettings(url: database.url)).allRows(sql) }
        return try written { try $0.rows(sql) }
    }

    /// The first column of the first row of `sql`, read through the store (committed data only).
    func scalar(_ sql: String) throws -> Value {
        try stack.store.read { session in try session.connection.scalar(sql) }
    }

    /// Makes the writer refuse to insert a row of `table` named `name`, as a write that fails in
    /// SQLite would (`SQLiteError.Code.constraint`). The trigger lives on the writer's connection
    /// only: the file's schema is untouched, and every check before the write passes. With
    /// `atCommit`, PostgreSQL refuses the row only at `COMMIT` (a deferred constraint trigger),
    /// after every statement of the transaction was answered; SQLite, which has no such
    /// trigger, at the insert.
    func refuseWrites(ofName name: String, in table: String = "Person", atCommit: Bool = false) throws {
        if let database {
            // PostgreSQL has no temporary triggers: the test's own database gets a real one.
            let trigger = atCommit
                ? "CONSTRAINT TRIGGER \"refuse_\(table)\" AFTER INSERT ON \"\(table)\" DEFERRABLE INITIALLY DEFERRED"
                : "TRIGGER \"refuse_\(table)\" BEFORE INSERT ON \"\(table)\""
            try PostgresConnection(PostgresSettings(url: database.url)).execute("""
                CREATE FUNCTION "refuse_\(table)"() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'refused by the test' USING ERRCODE = 'check_violation'; END $$;
                CREATE \(trigger) FOR EACH ROW WHEN (NEW.name = '\(name)')
                EXECUTE FUNCTION "refuse_\(table)"()
                """)
            return
        }
        try stack.sqliteStore.writer.withLock { writer in
            try writer.connection.execute("""
                CREATE TEMP TRIGGER "refuse_\(table)" BEFORE INSERT ON main."\(table)" WHEN NEW.name = '\(name)'
                BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
                """)
        }
    }

    /// Runs `body` holding the store's writer (file and PostgreSQL stores: an in-memory
    /// store's reads go through its writer), so that commits handed over meanwhile stay queued
    /// until it returns.
    func holdingTheWriter<T>(_ body: () throws -> T) throws -> T {
        if let postgres = stack.store as? PostgresStore { return try postgres.writer.withLock { _ in try body() } }
        precondition(url != nil, "holdingTheWriter: an in-memory store reads through its writer, and would wait for it.")
        return try stack.sqliteStore.writer.withLock { _ in try body() }
    }

    /// Runs `body` with the writer's queue suspended: the commits it hands over wait, to be
    /// written together once the queue resumes, when `body` returns or throws. The drain that
    /// wrote the commits before is waited for first: it would take one handed over meanwhile.
    func withWriterQueueSuspended<T>(_ body: () throws -> T) rethrows -> T {
        guard let queued = stack.store as? any QueuedStore else { preconditionFailure("withWriterQueueSuspended: a queued store (every kind) was expected.") }
        queued.writeQueue.sync {}
        queued.writeQueue.suspend()
        defer { queued.writeQueue.resume() }
        return try body()
    }

    /// Holds the store's writer from outside, as another process's write would, until the
    /// closure it returns is called: on SQLite a `BEGIN IMMEDIATE` on a connection of its own;
    /// on PostgreSQL a lock on `person`'s row, which the writer waits for when a commit
    /// changes that person (file and PostgreSQL stores).
    func holdTheWriterFromOutside(locking person: ObjectID) throws -> () throws -> Void {
        if let url = database?.url {
            let other = try PostgresConnection(PostgresSettings(url: url))
            try other.execute("BEGIN")
            try other.execute("SELECT 1 FROM \"Person\" WHERE \"Z_PK\" = \(person.primaryKey) FOR UPDATE")
            return { try other.execute("COMMIT") }
        }
        let other = try rawConnection()
        try other.execute("BEGIN IMMEDIATE")
        return { try other.execute("COMMIT") }
    }

    /// How many callers wait for the writer (`flush`, a commit that waits to be written, a
    /// batch operation, an aggregate query, a check waiting for an unwritten commit or batch).
    var writerWaiters: Int {
        if let postgres = stack.store as? PostgresStore { return postgres.state.withLock { $0.waiters.count } }
        return stack.sqliteStore.state.withLock { $0.waiters.count }
    }

    /// The objects the store takes for never stored, their inserting commit having failed
    /// (`QueueState.failedInserts`); `add` marks more, as a failed commit would.
    func failedInserts(adding ids: [ObjectID] = []) -> Set<ObjectID> {
        func update(_ inserts: inout FailedInserts) -> Set<ObjectID> {
            if !ids.isEmpty { inserts.add(ids) }
            return inserts.objects
        }
        if let postgres = stack.store as? PostgresStore { return postgres.state.withLock { update(&$0.failedInserts) } }
        return stack.sqliteStore.state.withLock { update(&$0.failedInserts) }
    }

    /// Whether a batch operation is queued and not written yet.
    var hasUnwrittenBatch: Bool {
        if let postgres = stack.store as? PostgresStore { return postgres.hasUnwrittenBatch }
        return stack.sqliteStore.hasUnwrittenBatch
    }

    /// How many commits the store was handed so far (its last sequence number).
    var commitsHandedOver: UInt64 {
        if let postgres = stack.store as? PostgresStore { return postgres.state.withLock { $0.lastSequence } }
        return stack.sqliteStore.state.withLock { $0.lastSequence }
    }

    /// How many commits wait for the commits before them to be written before they are checked
    /// (`QueuedStore.unwrittenInsertClaimed`).
    var commitsWaitingForEarlierOnes: Int {
        if let postgres = stack.store as? PostgresStore { return postgres.state.withLock { $0.waiters.filter(\.waiter.onlyWaits).count } }
        return stack.sqliteStore.state.withLock { $0.waiters.filter(\.waiter.onlyWaits).count }
    }

    /// Whether `error` is the database refusing a write `refuseWrites` set up: `SQLiteError` on
    /// SQLite, `PostgresError` on PostgreSQL.
    static func isRefusal(_ error: any Error) -> Bool {
        (error is SQLiteError || error is PostgresError) && "\(error)".contains("refused by the test")
    }

    /// True when the writer has nothing left to write.
    var overlayIsEmpty: Bool {
        get throws { try stack.store.read { $0.overlay.isEmpty } }
    }

    deinit {
        if let directory { try? FileManager.default.removeItem(at: directory) }
        // The stack's connections are closed by `drop`'s FORCE.
        database?.drop()
    }
}

/// A new empty directory for one test's files; the caller removes it.
/// A fresh temporary directory and the URL of a store file in it (not created yet).
func makeStoreLocation() throws -> (directory: URL, url: URL) {
    let directory = try makeTemporaryDirectory()
    return (directory, directory.appendingPathComponent("store.sqlite"))
}

/// Removes a temporary directory, first giving it back the permissions a test may have taken.
func removeTemporaryDirectory(_ directory: URL) {
    try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
    try? FileManager.default.removeItem(at: directory)
}

func makeTemporaryDirectory() throws -> URL {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ContextStackTests-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    return directory
}

/// Whether `error` is the database refusing a write `TestStore.refuseWrites` set up.
func isRefusal(_ error: any Error) -> Bool { TestStore.isRefusal(error) }

/// Records errors reported to `stack.onError`.
final class ErrorRecorder: Sendable {
    private let errors = Locked<[any Error]>([])
    var all: [any Error] { errors.withLock { $0 } }
    func record(_ error: any Error) { errors.withLock { $0.append(error) } }
}

extension Stack {
    /// The stack's store as the SQLite store it is in these tests, for tests that reach into
    /// its writer or state.
    var sqliteStore: SQLiteStore {
        guard let store = store as? SQLiteStore else { preconditionFailure("The stack's store is not an SQLite store.") }
        return store
    }
}
