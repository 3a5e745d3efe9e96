import Dispatch
import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackPostgres

/// A model's tables in a PostgreSQL database, behind the same seam as `SQLiteStore`: every
/// context, topology, predicate and live result works on it unchanged.
///
/// The queue, the overlay, group commit, pinned views and claims are `QueuedStore`'s, as on
/// SQLite. What is PostgreSQL's own:
/// - **Reads** go through a small pool of connections. Each read is one `REPEATABLE READ READ
///   ONLY` transaction whose snapshot is taken under the state lock — the lock the writer
///   commits under — so the snapshot and the overlay together show every commit of this
///   process wholly or not at all; commits of other processes and machines are in the
///   snapshot or not, whole, as PostgreSQL guarantees.
/// - **Writes** go through one writer connection, one transaction per batch of commits. Under a
///   merge policy that compares with the store, rows another process or machine may have
///   changed since the context read them are locked (`SELECT … FOR NO KEY UPDATE`) and the policy is
///   applied again to what is stored now, inside the transaction that writes it: no lost
///   update, whoever the other writer is. Inserts of one entity go out up to 512 rows a
///   statement.
/// - **Keys** come from one sequence per table in blocks (`PostgresKeys`), on a connection of
///   their own so that `create` never waits for the writer's transaction.
/// - **Connections** that break (a restart, a failover, a dropped network) are replaced on
///   their next use; the commit that was being written fails whole, with a `PostgresError`.
package final class PostgresStore: QueuedStore {
    package typealias Writer = PostgresConnection

    package let graph: ModelGraph
    package var dialect: any SQLDialect { PostgresDialect() }
    package let state = Locked(QueueState())
    package let writeQueue = DispatchQueue(label: "ContextStack.PostgresStore.writer", qos: .utility)
    package let waiterRegistrations = DispatchQueue(label: "ContextStack.PostgresStore.waiter-registrations")
    package let writesInBackground: Bool
    package let reportError: @Sendable (any Error) -> Void
    package let settings: PostgresSettings
    /// The sessions' statement timeout in milliseconds (0 for none), as the first connection
    /// found it (`PostgresConnection.statementTimeout`): how long a read under the state lock
    /// goes on reading again (`readingAgainOnLockTimeout`).
    private let statementTimeout: Int
    let tracer: StatementTracer

    /// The writer's connection; `nil` until the first write after it broke. Not private: tests
    /// hold its lock to keep commits queued.
    let writer: Locked<PostgresConnection?>
    /// The session of the writer connection that broke under a transaction that wrote history
    /// and reached its `COMMIT` — the one `QueuedStore.write` asks `committedAfterAll` about
    /// next, on the same thread. A doorbell's ring sent alone, which writes no history, never
    /// sets it, so one breaking in between cannot stand in for it.
    private let brokenWriter = Locked<(pid: Int32, started: String)?>(nil)
    /// Idle reader connections.
    private let readers = Locked<[PostgresConnection]>([])
    /// The connection key blocks are reserved on; `nil` after it broke.
    private let keyConnection = Locked<PostgresConnection?>(nil)
    private let keys = PostgresKeys()
    /// The tables of every part added, by the name of their root entity.
    private let tables: Locked<[String: Table]>

    static let maximumIdleReaders = 4

    /// Whether every save writes history (`Z_HISTORY`); see `PostgresStore+History.swift`.
    package let tracksHistory: Bool
    /// The channel this store's commits ring other stacks' listeners on (`historyChannelSQL`).
    let historyChannel: String
    /// Names this store object in the history it writes, so its own listener can tell its
    /// commits from other stacks' (other processes', other machines').
    let instance = UUID().uuidString
    /// The history listeners `followHistory` started.
    let listeners = Locked<[PostgresHistoryListener]>([])
    /// When this store last rang the history channel, and whether a ring is owed.
    let doorbell = Locked(HistoryDoorbell())
    /// Starts a read: its snapshot is taken by the `SELECT`, in the same round trip.
    static let beginRead = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT 1"
    /// Starts a read whose snapshot its first statement takes (`withReadTransaction`).
    static let beginReadLater = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    /// Starts a read whose statements run under the state lock (`withCommittedView`, the
    /// history listener's delivery): they wait for a table's lock no longer than the writer's
    /// do there (`lockWaitUnderStateLock`).
    ///
    /// A read waits for a table's lock only behind an `ACCESS EXCLUSIVE` one: another server's
    /// migration (`ALTER TABLE`), queued behind this process's writer, whose transaction holds
    /// its tables' locks until its `COMMIT` — which waits for the state lock the read holds. No
    /// one would give way (PostgreSQL cannot see the state lock) until the migration's lock
    /// timeout failed it. Instead the read fails with `55P03`, lets go of the state lock, and
    /// runs again (`readingAgainOnLockTimeout`): the writer commits, the migration goes on.
    static let beginReadUnderStateLock = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; \(lockWaitUnderStateLock); SELECT 1"

    /// Connects to the server, then creates `schema`'s tables in the database or checks that
    /// it holds them (`PostgresSchemaInstaller`).
    /// - Throws: `StoreError` when the database holds another model or foreign tables;
    ///   `PostgresError` when the server cannot be reached or refuses.
    package init(graph: ModelGraph, schema: StoreSchema, settings: PostgresSettings, autoMigrating: Bool, writesInBackground: Bool,
                 tracksHistory: Bool = true, tracer: StatementTracer = StatementTracer(),
                 reportError: @escaping @Sendable (any Error) -> Void) throws {
        self.graph = graph
        self.settings = settings
        self.tracer = tracer
        self.writesInBackground = writesInBackground
        self.reportError = reportError
        let connection = try Self.connect(settings, tracer: tracer)
        try Self.checkServerVersion(connection.serverVersion, oldest: settings.oldestServerVersion, server: settings.redactedURL)
        statementTimeout = connection.statementTimeout
        var tracks = false
        _ = try PostgresSchemaInstaller.install(schema, on: connection, autoMigrating: autoMigrating) { connection in
            tracks = try Self.prepareHistory(connection, enable: tracksHistory)
        }
        self.tracksHistory = tracks
        historyChannel = try connection.scalar(Self.historyChannelSQL).stringValue ?? "cs_history"
        writer = Locked(connection)
        tables = Locked(Dictionary(uniqueKeysWithValues: schema.tables.map { ($0.name, $0) }))
    }

    deinit {
        for listener in listeners.withLock({ $0 }) { listener.stop() }
    }

    /// Adds another configuration's part of the model, in the same database.
    package func attach(schema: StoreSchema, autoMigrating: Bool) throws {
        try writer.withLock { slot in
            let connection = try Self.usable(&slot, settings: settings, tracer: tracer)
            _ = try PostgresSchemaInstaller.install(schema, on: connection, autoMigrating: autoMigrating)
        }
        tables.withLock { tables in
            for table in schema.tables { tables[table.name] = table }
        }
    }

    /// Refuses a server older than `oldest` (`PostgresSettings.oldestServerVersion`), before
    /// anything is created in its database.
    /// - Throws: `StoreError` `.cannotOpen`, naming the server's version.
    static func checkServerVersion(_ version: Int, oldest: Int, server: String) throws {
        guard version < oldest else { return }
        throw StoreError(.cannotOpen, "The PostgreSQL server at \(server) is version \(version / 10_000) (\(version)): ContextStack needs PostgreSQL \(oldest / 10_000) or later. Nothing was changed in its database.")
    }

    private static func connect(_ settings: PostgresSettings, tracer: StatementTracer) throws -> PostgresConnection {
        let connection = try PostgresConnection(settings)
        connection.tracer = tracer
        return connection
    }

    /// The connection in `slot`, or a new one when there is none or it broke.
    private static func usable(_ slot: inout PostgresConnection?, settings: PostgresSettings, tracer: StatementTracer) throws -> PostgresConnection {
        if let connection = slot, !connection.isBroken { return connection }
        slot = nil
        let connection = try connect(settings, tracer: tracer)
        slot = connection
        return connection
    }

    // MARK: - Keys

    /// A primary key for a new row of `root`'s table, never handed out before by any process
    /// or machine (see `PostgresKeys`).
    package func reserveKey(for root: EntityDescription) throws -> Int64 {
        guard let table = tables.withLock({ $0[root.name] }) else {
            preconditionFailure("\(root.name) is in no store of this stack: add a store for a configuration that holds it (addPostgresStore(url:configuration:)) before creating its objects.")
        }
        return try keyConnection.withLock { slot in
            do {
                return try keys.reserveKey(for: table) { try Self.usable(&slot, settings: settings, tracer: tracer) }
            } catch let error as PostgresError where error.code.isConnectionFailure {
                // The server closed the key connection since its last use: once more on a new
                // one (a `nextval` that may have run is harmless: its keys are never reused).
                slot = nil
                return try keys.reserveKey(for: table) { try Self.usable(&slot, settings: settings, tracer: tracer) }
            }
        }
    }

    // MARK: - Reading

    /// Runs `body` with a reader connection inside a read-only transaction and the overlay,
    /// taken so that the overlay holds exactly what the transaction's snapshot lacks.
    ///
    /// The snapshot is taken by the read's first statement, which takes `BEGIN` along, outside
    /// the state lock — a round trip there would hold up every commit and read of the process.
    /// With nothing to keep in step (no overlay that it must lack exactly, no handed-over
    /// commits to catch up with) any later snapshot is as right as one taken under the lock.
    /// Otherwise the lock's `writeEpoch` is noted, and checked again once the first
    /// statement's result has arrived, before any row is used (`PostgresConnection.snapshotCheck`):
    /// unchanged, no commit of this process became visible in between (the writer moves it
    /// before it sends `COMMIT`, under the lock), so the snapshot is the one the lock would have
    /// given; changed, the read runs again with its snapshot taken under the lock. A pinned
    /// view's read always takes it there. As on SQLite (`SQLiteStore.withReadSession`).
    ///
    /// Such a read that runs one statement (`ReadShape.isOneStatement`, with an empty overlay)
    /// needs no transaction at all: the statement's own snapshot is the read's, and it goes out
    /// alone, in autocommit.
    ///
    /// A read of rows by their keys (`ReadShape.byKeys`) runs on the writer's connection when
    /// no write holds it (`readOnIdleWriter`), and on a pooled reader otherwise.
    package func withReadSession(pin: UInt64?, whileLocked: (() -> Void)?, shape: ReadShape, _ body: (ReadSession) throws -> Void) throws {
        try readTwice { underLock in
            if shape == .byKeys && pin == nil && !underLock,
               let stands = try readOnIdleWriter(whileLocked: whileLocked, body) {
                return stands
            }
            return try read(pin: pin, whileLocked: whileLocked, oneStatement: shape.isOneStatement, underLock: underLock, body)
        }
    }

    /// One attempt of a read; `false` when its snapshot turned out not to be the one it needed,
    /// or its connection broken at its first statement (it does not stand). `underLock` takes
    /// the snapshot under the lock whatever the read needs (and a broken connection is then
    /// replaced at `BEGIN`).
    private func read(pin: UInt64?, whileLocked: (() -> Void)?, oneStatement: Bool, underLock: Bool,
                      _ body: (ReadSession) throws -> Void) throws -> Bool {
        var plan = ReadPlan(time: .now, epoch: nil)
        let (connection, (overlay, pinned)) = try withReadTransaction(snapshotTime: { state in
            guard pin == nil && !underLock else { return .now }
            plan = ReadPlan(state, whileLocked: whileLocked, oneStatement: oneStatement)
            return plan.time
        }) { state, _ in
            whileLocked?()
            return (state.overlay(forPin: pin), pin.flatMap { state.pins[$0] })
        }
        defer { finishReading(connection) }
        return try run(body, on: connection, plan: plan, overlay: overlay, pinned: pinned)
    }

    /// A read by keys on the writer's connection, when no write holds the connection, nothing
    /// is queued for it, and it is idle, outside any transaction; `nil` otherwise (the read then
    /// takes a pooled reader). Otherwise a read-modify-write wakes two server processes, the
    /// reader's and the writer's, one after the other, where a program that used one
    /// connection wakes one: about 70 µs a commit on a 2-core machine (measured with libpq
    /// alone, 2026-11-26).
    ///
    /// The read holds the writer's lock, so a commit that comes meanwhile waits for it — one
    /// statement in autocommit, an index probe per key, which is why only reads by keys come
    /// here. With a commit queued or being written it would hold that write up (and, its
    /// overlay not empty, need a transaction: round trips more), so it goes to a reader then.
    /// - Returns: whether the read stands (`read`), `nil` when it did not run here.
    private func readOnIdleWriter(whileLocked: (() -> Void)?, _ body: (ReadSession) throws -> Void) throws -> Bool? {
        try writer.withLockIfAvailable { slot -> Bool? in
            guard let connection = slot, !connection.isInTransaction, connection.isAlive() else { return nil }
            let overlay = state.withLock { state -> Overlay? in
                guard state.nothingToWrite else { return nil }
                whileLocked?()
                return state.overlay
            }
            guard let overlay else { return nil }
            // Its own snapshot, in autocommit, and no epoch to check: no commit of this process
            // can be written while the read holds the writer. (The check that always passes
            // still makes a read whose connection broke run again, on a reader.)
            let plan = ReadPlan(time: .byTheStatement, epoch: nil)
            defer {
                // One statement in autocommit leaves no transaction; a connection that somehow
                // does is not the writer's any more, and the next write connects anew.
                if connection.isInTransaction && !connection.isBroken { slot = nil }
            }
            return try run(body, on: connection, plan: plan, overlay: overlay, pinned: nil)
        } ?? nil
    }

    /// When a read's snapshot is taken, and the writer's epoch it is checked against.
    private struct ReadPlan {
        var time: SnapshotTime
        var epoch: UInt64?

        init(time: SnapshotTime, epoch: UInt64?) {
            self.time = time
            self.epoch = epoch
        }

        /// For a read that need not take its snapshot under the lock, with `state` under the
        /// lock: by its first statement, or by its only one when the overlay is empty; checked
        /// against the writer's epoch when it catches up (`whileLocked`) or merges an overlay.
        init(_ state: QueueState, whileLocked: (() -> Void)?, oneStatement: Bool) {
            epoch = whileLocked != nil || !state.overlay.isEmpty ? state.writeEpoch : nil
            time = oneStatement && state.overlay.isEmpty ? .byTheStatement : .atTheFirstStatement
        }
    }

    /// Runs a read's `body` on `connection`, whose snapshot `plan` says when it is taken;
    /// `false` when the snapshot turned out not to be the one the read needed, or the
    /// connection broken at the first statement.
    private func run(_ body: (ReadSession) throws -> Void, on connection: PostgresConnection, plan: ReadPlan,
                     overlay: Overlay, pinned: PinnedImages?) throws -> Bool {
        connection.mustReadAgain = false
        if let epoch = plan.epoch {
            connection.snapshotCheck = snapshotUnchanged(since: epoch)
        } else if plan.time != .now {
            // Nothing to check, but a pooled connection the server closed since its last use
            // fails at the read's first statement, not at a `BEGIN` of its own: then the read
            // runs again, on another connection.
            connection.snapshotCheck = { true }
        }
        defer { connection.snapshotCheck = nil }
        let before = connection.preparedStatementsRun
        do {
            try body(ReadSession(graph: graph, connection: connection, overlay: overlay, pinned: pinned))
            assert(plan.time != .byTheStatement || connection.preparedStatementsRun - before <= 1,
                   "A read said to run one statement ran \(connection.preparedStatementsRun - before): its snapshot may not have held for all of them.")
            return !connection.mustReadAgain
        } catch where connection.mustReadAgain {
            return false
        }
    }

    /// When a read's snapshot is taken.
    private enum SnapshotTime {
        /// Now, under the state lock: `BEGIN … ; SELECT 1`.
        case now
        /// By the read's first statement, which carries `BEGIN` along.
        case atTheFirstStatement
        /// By the read's only statement, in autocommit: no transaction.
        case byTheStatement
    }

    package func withCommittedView<T>(_ body: (inout QueueState, inout RowReader) throws -> T) throws -> T {
        try readingAgainOnLockTimeout {
            let (connection, result) = try withReadTransaction(begin: Self.beginReadUnderStateLock) { state, connection in
                var reader = RowReader(session: ReadSession(graph: graph, connection: connection, overlay: state.queued), context: nil)
                return try body(&state, &reader)
            }
            finishReading(connection)
            return result
        }
    }

    /// Runs `read`, a read under the state lock begun with `beginReadUnderStateLock`, again
    /// when it fails waiting for a table's lock: what it did under the lock before it failed
    /// was reading (its callers read everything before they change or tell anything), and is
    /// done again. Between two attempts, with the lock let go of, it pauses — 1 ms, doubling
    /// up to 50 ms — so that the writer's `COMMIT` and this process's other commits take the
    /// lock meanwhile. It gives up, throwing the lock timeout, once it has waited as long as
    /// one statement may (the statement timeout; never when that is 0): the wait it breaks
    /// up is bounded as a single statement's was.
    func readingAgainOnLockTimeout<T>(_ read: () throws -> T) throws -> T {
        let start = DispatchTime.now().uptimeNanoseconds
        let limit = UInt64(max(0, statementTimeout)) * 1_000_000
        var pause: UInt32 = 1_000
        while true {
            do {
                return try read()
            } catch let error as PostgresError where error.code == .lockNotAvailable {
                if limit > 0, DispatchTime.now().uptimeNanoseconds - start >= limit { throw error }
                usleep(pause)
                pause = min(pause * 2, 50_000)
            }
        }
    }

    /// Begins a read transaction on a reader connection under the state lock and runs `body`
    /// there; returns the connection, still inside its transaction, for `finishReading`.
    ///
    /// A pooled connection that the server closed since its last use (a restart, a failover)
    /// fails at `BEGIN`, before `body` ran: it is replaced by a new connection, once, so the
    /// first read after a restart does not fail for a connection nobody used meanwhile.
    ///
    /// `snapshotTime` says, for the state under the lock, when the snapshot is taken: now, or
    /// by the read's first statement, which takes `BEGIN` along in its own round trip (a read
    /// then costs one round trip fewer), or by its only statement, with no transaction at all.
    private func withReadTransaction<T>(snapshotTime: (QueueState) -> SnapshotTime = { _ in .now }, begin: String = beginRead,
                                        _ body: (inout QueueState, PostgresConnection) throws -> T) throws -> (PostgresConnection, T) {
        var connection = try takeReader()
        var retried = false
        while true {
            var began = false
            do {
                let result = try state.withLock { state -> T in
                    switch snapshotTime(state) {
                    case .atTheFirstStatement where connection.isAlive():
                        connection.beginLater(Self.beginReadLater)
                    case .byTheStatement where connection.isAlive():
                        break
                    default:
                        try connection.execute(begin)
                    }
                    began = true
                    return try body(&state, connection)
                }
                return (connection, result)
            } catch {
                if !began && !retried && connection.isBroken {
                    retried = true
                    connection = try Self.connect(settings, tracer: tracer)
                    continue
                }
                finishReading(connection)
                throw error
            }
        }
    }

    /// An idle reader whose last read ended well, or a new one.
    private func takeReader() throws -> PostgresConnection {
        while let idle = readers.withLock({ $0.popLast() }) {
            guard !idle.isBroken else { continue }
            do {
                try idle.settle()
            } catch {
                // Its read's `COMMIT` failed: it may still be inside that transaction, and a
                // read on it would see an old snapshot. It is closed instead (and, unless the
                // server went away, which the next read or commit reports, onError hears why).
                if !idle.isBroken { reportError(error) }
                continue
            }
            if !idle.isInTransaction { return idle }
        }
        return try Self.connect(settings, tracer: tracer)
    }

    /// The newest settled transaction, where a history listener starts: read with a reader of
    /// the pool, outside any transaction and outside `stack.trace` (following the history runs
    /// nothing the trace shows). A pooled reader the server closed since its last use is
    /// replaced once, as for any read.
    func startOfFollowing() throws -> HistoryToken? {
        var connection = try takeReader()
        var retried = false
        while true {
            connection.tracer = nil
            defer { connection.tracer = tracer }
            do {
                let token = try Self.lastHistoryToken(on: connection)
                finishReading(connection)
                return token
            } catch {
                guard !retried, connection.isBroken else { throw error }
                retried = true
                connection = try Self.connect(settings, tracer: tracer)
            }
        }
    }

    /// Ends a reader's transaction and puts it back in the pool, unless it broke. The `COMMIT`
    /// is sent without waiting for its answer (a read-only transaction has nothing to save):
    /// the caller goes on at once, and the next read on the connection checks the answer
    /// first (`takeReader`).
    private func finishReading(_ connection: PostgresConnection) {
        if connection.isBroken { return }
        if connection.abandonPendingBegin() {
            // The read ran no statement: its transaction never began.
        } else if connection.isInTransaction {
            do {
                try connection.send("COMMIT")
            } catch {
                reportError(error)
                return
            }
        }
        readers.withLock { idle in
            if idle.count < Self.maximumIdleReaders { idle.append(connection) }
        }
    }

    // MARK: - Writing

    /// Runs `body` in one transaction on the writer connection, connecting first when it has
    /// none or it broke. A connection that breaks during the transaction is dropped: nothing
    /// of the transaction is stored (or, when it broke during `COMMIT` itself, the server
    /// decided; see Docs/Postgres.md), and the next write connects again.
    ///
    /// The statements `body` queues go out with `COMMIT`, in one round trip — which `commit`
    /// runs under the state lock, where reads begin. So that no read waits long behind a row
    /// another process or machine holds locked, the transaction waits for locks at most
    /// `lockWaitUnderStateLock`; past that it is rolled back and written again patiently: its
    /// statements answered before the state lock is taken, `COMMIT` alone under it.
    ///
    /// The bound is the connection's `transactionPreamble`, which follows `BEGIN` only when it
    /// goes out with a queued or prepared statement: a commit alone. A group commit clears it
    /// (`lockRows`), so its `BEGIN` goes without the bound — as it must: each of its
    /// commits has its statements answered at its `RELEASE`, outside the state lock, and a lock
    /// timeout there would fail that commit instead of being waited out.
    ///
    /// The history doorbell goes once per transaction, after everything `body` queued
    /// (`ringDue`, `queueRing`); a transaction that fails owes its ring to the commits that
    /// waited for it (`ringLost`).
    ///
    /// A transaction PostgreSQL fails to break a deadlock (or for a serialization failure) is
    /// rolled back and written again, up to `transactionAttempts` times in all: nothing of it
    /// was stored, and the transaction it lost to goes through meanwhile.
    package func writeTransaction(_ body: (inout PostgresConnection) throws -> Void, commit: (() throws -> Void) throws -> Void) throws {
        try writer.withLock { slot in
            var patient = false
            var attempts = 0
            while true {
                attempts += 1
                var connection = try Self.usable(&slot, settings: settings, tracer: tracer)
                if !connection.isAlive() {
                    // Closed by the server since the last write (a restart, a failover): nothing
                    // is sent yet, so the transaction starts on a new connection.
                    slot = nil
                    connection = try Self.usable(&slot, settings: settings, tracer: tracer)
                }
                // Read once per connection, while it works: `committedAfterAll` names its session.
                if tracksHistory { try connection.readBackendStart() }
                // `BEGIN` goes out with the transaction's first statement: no round trip of its own.
                connection.beginLater(Self.beginWrite)
                connection.transactionPreamble = patient ? [] : [Self.lockWaitUnderStateLock]
                var ring: HistoryDoorbell.CommitRing?
                do {
                    try body(&connection)
                    ring = ringDue()
                    try queueRing(ring, writer: connection)
                    if patient { try connection.settle() }
                    try commit { try connection.commit() }
                    return
                } catch {
                    ringLost(ring)
                    if connection.isBroken {
                        // `ring` is set once the transaction's history is queued, before `COMMIT`.
                        if ring != nil, let started = connection.backendStart, !started.isEmpty {
                            brokenWriter.withLock { $0 = (connection.backendPID, started) }
                        }
                        slot = nil
                    } else if connection.abandonPendingBegin() {
                        // Nothing was sent: there is no transaction to roll back.
                    } else if connection.isInTransaction {
                        do {
                            try connection.execute("ROLLBACK")
                        } catch {
                            slot = nil
                        }
                    }
                    if !patient, slot != nil, let error = error as? PostgresError, error.code == .lockNotAvailable {
                        patient = true
                        continue
                    }
                    if slot != nil, abandonsTransaction(error), attempts < Self.transactionAttempts {
                        // Rolled back whole, its locks released: the other transaction goes
                        // through, and this one is written again after it.
                        continue
                    }
                    throw error
                }
            }
        }
    }

    /// Whether the write transaction that just failed with `error` was committed after all:
    /// its connection broke (or the server was given up on) once its `COMMIT` may have been
    /// sent, and the server may have saved it. The session that ran it is ended first, and
    /// waited for (`pg_terminate_backend`), since until it ends it may still commit; then the
    /// history rows of `sequences`, the commits the transaction wrote, tell: the transaction
    /// committed if and only if they are there. `false` when that cannot be known — no
    /// history is tracked, the server cannot be reached, the session does not end in time —
    /// and the commits report the error, as they did before this check.
    package func committedAfterAll(_ sequences: [UInt64], error: any Error) -> Bool {
        let broken = brokenWriter.withLock { $0.take() }
        guard let broken, tracksHistory, !sequences.isEmpty,
              (error as? PostgresError)?.code.isConnectionFailure == true else { return false }
        do {
            let probe = try Self.connect(settings, tracer: tracer)
            // The wait below is `sessionEndWait`, whatever statement timeout the URL sets.
            try probe.execute("SET statement_timeout = 0")
            let session: [Value] = [.integer(Int64(broken.pid)), .text(broken.started)]
            let find = "FROM pg_stat_activity WHERE pid = ? AND backend_start::text = ?"
            try probe.query("SELECT pg_terminate_backend(pid, \(Self.sessionEndWait)) \(find)", session) { _ in }
            guard try probe.scalar("SELECT count(*) \(find)", session) == .integer(0) else { return false }
            let keys = sequences.map { Value.integer(Int64(bitPattern: $0)) }
            let placeholders = Array(repeating: "?", count: keys.count).joined(separator: ", ")
            return try probe.scalar("SELECT count(*) FROM \"Z_HISTORY\" WHERE \"Z_STACK\" = ? AND \"Z_SEQ\" IN (\(placeholders))",
                                    [.text(instance)] + keys) != .integer(0)
        } catch {
            return false
        }
    }

    /// How long `committedAfterAll` waits for the broken connection's session to end, in
    /// milliseconds.
    static let sessionEndWait = 10_000

    /// A write transaction reads committed rows at each statement, whatever the server's
    /// `default_transaction_isolation`: the merge policy applied again to rows just locked,
    /// and the writer's look at references (`keepReferencesWhole`) after a `DELETE` waited for
    /// another transaction, must see what that transaction committed.
    static let beginWrite = "BEGIN ISOLATION LEVEL READ COMMITTED"

    /// The longest a commit's statements wait for another transaction's locks while they may
    /// be under the state lock: a writer of another ContextStack process holds its locks for
    /// one round trip and a disk flush, a millisecond or so.
    static let lockWaitUnderStateLock = "SET LOCAL lock_timeout = '50ms'"

    package func execute(_ sql: String, writer: inout PostgresConnection) throws {
        try writer.execute(sql)
    }

    package func storedObjects(_ ids: [ObjectID], writer: inout PostgresConnection) throws -> Set<ObjectID> {
        try storedObjects(ids, db: writer)
    }

    /// Writes one commit in `QueuedStore.writeCommit`'s frame — the merge policy applied again
    /// to the rows `lockRows` locked, the references kept whole — with `fetchOrCreate`s merged
    /// into rows saved meanwhile (`writeClaiming`), or runs one batch operation.
    package func writeItem(_ item: QueueItem, writer: inout PostgresConnection) throws -> WrittenItem {
        if let operation = item.batch { return .batch(try execute(operation, db: writer)) }
        let connection = writer
        return try writeCommit(item, db: connection) { try writeClaiming($0, on: connection) }
    }

    /// Locks, before a transaction's commits are written, the rows they update or delete,
    /// until the transaction ends — in the one order every writer keeps (`LockSet`): another
    /// process's commit to them waits for this one, and the merge policy (`writeItem`) reads
    /// them as they are stored now.
    ///
    /// - A commit alone is locked only under a policy that compares with the store
    ///   (`.objectTrump` writes the changed values whatever is stored, and its save stays one
    ///   round trip), through a prepared statement, so that its `BEGIN` carries the lock wait
    ///   bound (`writeTransaction`).
    /// - A group locks every row of all its commits first. Locked one commit at a time
    ///   instead, two processes' groups could each hold a row the other's next commit needs —
    ///   a deadlock, which PostgreSQL breaks only after `deadlock_timeout` (a second), by
    ///   failing one of them. The keys go in the statement's text (they are integers), through
    ///   the simple protocol, so the group's `BEGIN` goes out without the bound (see there).
    package func lockRows(of batch: [QueueItem], writer: inout PostgresConnection) throws {
        var rows = LockSet()
        if batch.count == 1 {
            guard let item = batch.first, item.batch == nil, item.changes.checksStore(under: item.policy) else { return }
            rows.add(item.changes)
            try rows.each { sql, arguments in try writer.run(sql, arguments) }
        } else {
            // A group's commits have their statements answered at their `RELEASE`, outside the
            // state lock, and wait for other transactions' locks there as long as it takes:
            // the bound of a commit alone must not go out with a `BEGIN` that a prepared
            // statement takes first (the writer's look at a failed insert, for a group that
            // locks nothing up front), or a commit of the group would fail alone with 55P03.
            writer.transactionPreamble = []
            for item in batch where item.batch == nil { rows.add(item.changes) }
            try rows.each(inline: true) { sql, _ in try writer.execute(sql) }
        }
    }

    /// A deadlock PostgreSQL broke by failing this transaction's statement, or a serialization
    /// failure. Inside a commit's savepoint only the savepoint is aborted, but rolling back to
    /// it would keep the locks the group's earlier commits took — which the other transaction
    /// may be waiting for — so the whole transaction is rolled back, and written again once the
    /// other is through.
    package func abandonsTransaction(_ error: any Error) -> Bool {
        guard let error = error as? PostgresError else { return false }
        return error.code == .deadlockDetected || error.code == .serializationFailure
    }

    /// How many times a transaction PostgreSQL failed to break a deadlock (or for a
    /// serialization failure) is written again before its error reaches the committers.
    static let transactionAttempts = 5

    /// A unique index PostgreSQL found violated while writing — by a row another process or
    /// machine saved after this commit was checked — as the `SaveError` the check would have
    /// thrown.
    package func saveError(_ error: any Error) -> any Error {
        guard let error = error as? PostgresError, error.code == .uniqueViolation, let index = error.constraint,
              let constraint = graph.tables.lazy.flatMap(\.uniqueConstraints).first(where: { $0.indexName == index })
        else { return error }
        return SaveError(.uniquenessViolated,
                         "Cannot save a commit: \(constraint.label) is unique, and another writer of the store saved the same values first. Nothing of this commit was saved.",
                         entityName: constraint.entity.name, keys: constraint.keys)
    }
}

/// The rows a writer locks before it writes them, in the one order every writer of the
/// database locks in — table by table in name order, each table's rows in key order — so that
/// two writers (two processes, two machines) never each hold a row the other waits for.
///
/// The lock is `FOR NO KEY UPDATE`, the one an `UPDATE` of columns without a unique index takes
/// anyway: it keeps two writers of one row apart as `FOR UPDATE` would, but not a writer that
/// only refers to the row (its `FOR KEY SHARE`, `keepReferencesWhole`), so relating an object
/// to another does not wait for a change to the other's values. A `DELETE`, and an `UPDATE` of
/// a uniquely indexed column, take the stronger lock themselves when they run.
private struct LockSet {
    private var tables: [String: (table: Table, keys: Set<Int64>)] = [:]

    mutating func add(_ changes: ChangeSet) {
        for update in changes.updates { tables[update.entity.table.name, default: (update.entity.table, [])].keys.insert(update.id.primaryKey) }
        for delete in changes.deletes { tables[delete.entity.table.name, default: (delete.entity.table, [])].keys.insert(delete.id.primaryKey) }
    }

    /// Hands `body` the statements that lock the rows, in order: with `?` placeholders and
    /// their arguments, or, `inline`, with the keys in the text and no arguments.
    func each(inline: Bool = false, _ body: (_ sql: String, _ arguments: [Value]) throws -> Void) throws {
        for name in tables.keys.sorted() {
            let (table, keys) = tables[name]!
            func statement(_ list: String) -> String {
                "SELECT 1 FROM \(table.quotedName) WHERE \"Z_PK\" IN (\(list)) ORDER BY \"Z_PK\" FOR NO KEY UPDATE"
            }
            let sorted = keys.sorted()
            if inline {
                for start in stride(from: 0, to: sorted.count, by: InLists.maximumWidth) {
                    let chunk = sorted[start..<min(start + InLists.maximumWidth, sorted.count)]
                    try body(statement(chunk.map(String.init).joined(separator: ", ")), [])
                }
            } else {
                try InLists.each(sorted) { placeholders, arguments in try body(statement(placeholders), arguments) }
            }
        }
    }
}
