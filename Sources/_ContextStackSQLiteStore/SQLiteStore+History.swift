import Dispatch
import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

// Persistent history on SQLite (Docs/History.md): a table written by the writer in each
// save's transaction, read back by `history(after:)`, and followed by a watcher that polls
// `PRAGMA data_version` on an idle connection to notice other connections' commits.

extension SQLiteStore {
    /// The history table: one row per transaction, its changes in one blob
    /// (`HistoryEncoding`). `Z_TOKEN` is SQLite's `AUTOINCREMENT` rowid: with one writer at a
    /// time per file, it grows in commit order, and a deleted number is never handed out again.
    static let historyCreation = [
        "CREATE TABLE IF NOT EXISTS Z_HISTORY (Z_TOKEN INTEGER PRIMARY KEY AUTOINCREMENT, Z_DATE REAL NOT NULL, Z_AUTHOR TEXT, Z_ORIGIN INTEGER NOT NULL, Z_STACK TEXT NOT NULL, Z_CHANGES BLOB NOT NULL)",
    ]

    static let historyQueries = HistoryQueries(
        headers: "SELECT Z_TOKEN, 0, Z_DATE, Z_AUTHOR, Z_STACK FROM Z_HISTORY WHERE Z_TOKEN > ? ORDER BY Z_TOKEN",
        transactions: "SELECT Z_TOKEN, 0, Z_DATE, Z_AUTHOR, Z_STACK, Z_CHANGES FROM Z_HISTORY WHERE Z_TOKEN > ? ORDER BY Z_TOKEN",
        arguments: { [.integer($0?.position ?? 0)] })

    /// Creates the history tables when asked to, and says whether the file tracks history:
    /// once one stack turned it on, every stack that opens the file writes it.
    static func prepareHistory(_ db: Connection, enable: Bool) throws -> Bool {
        if enable {
            try db.writeTransaction {
                for statement in historyCreation { try db.execute(statement) }
            }
            return true
        }
        return try db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'Z_HISTORY'").int64Value == 1
    }

    /// Starts writing history when another stack turned it on for the file after this one
    /// opened it (`addDatabaseStore(at:tracksHistory: true)` in another process, say): its
    /// watcher would otherwise never see this stack's commits.
    ///
    /// Called by the writer inside a write transaction, after the statements of a commit:
    /// those compared the connection's schema with the file's, so the in-memory lookup is
    /// current, and no other connection can change the schema before this transaction ends.
    /// A stack without history pays almost nothing per commit: the lookup runs only when the
    /// connection prepared a statement since the last save (`Connection.takePrepared`), which
    /// it does for every cached statement once another connection changed the schema. A stack
    /// of several files does not start (history needs the file to be the stack's only store:
    /// Docs/History.md).
    func noticeHistoryTurnedOn(_ db: Connection) {
        guard db.takePrepared(), db.schemaHasTable("Z_HISTORY"), parts.count == 1 else { return }
        historyTracked.store(true, ordering: .releasing)
    }

    package func writeHistory(_ changes: [HistoryChange], info: CommitInfo, sequence: UInt64, writer: inout WriterState) throws -> HistoryToken? {
        guard tracksHistory else { return nil }
        let db = writer.connection
        try db.cachedStatement("INSERT INTO Z_HISTORY (Z_DATE, Z_AUTHOR, Z_ORIGIN, Z_STACK, Z_CHANGES) VALUES (?, ?, ?, ?, ?)")
            .bindAndExecute([.double(Date().timeIntervalSince1970), info.author.map(Value.text) ?? .null,
                             .integer(Int64(bitPattern: info.origin)), .text(instance), .blob(HistoryEncoding.encode(changes))])
        return HistoryToken(position: db.lastInsertRowID)
    }

    package func history(after token: HistoryToken?) throws -> [HistoryTransaction] {
        try requireHistory()
        return try read(pin: nil, whileLocked: nil, shape: .statements) { session in
            try checkNotExpired(token, connection: session.connection)
            return try HistoryReading.transactions(after: token, connection: session.connection, graph: graph,
                                                   queries: Self.historyQueries).map(\.transaction)
        }
    }

    package func lastHistoryToken() throws -> HistoryToken? {
        try requireHistory()
        return try read(pin: nil, whileLocked: nil, shape: .oneStatement) { session in try Self.lastHistoryToken(on: session.connection) }
    }

    package func deleteHistory(before token: HistoryToken) throws {
        try requireHistory()
        try writer.withLock { state in
            let db = state.connection
            try db.writeTransaction {
                guard let last = try db.scalar("SELECT max(Z_TOKEN) FROM Z_HISTORY WHERE Z_TOKEN < ?", [.integer(token.position)]).int64Value else { return }
                try db.execute("DELETE FROM Z_HISTORY WHERE Z_TOKEN <= ?", [.integer(last)])
                let purged = try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'historyPurged'").int64Value ?? 0
                try db.execute("INSERT OR REPLACE INTO Z_METADATA (key, value) VALUES ('historyPurged', ?)", [.integer(max(purged, last))])
            }
        }
    }

    /// The newest transaction `deleteHistory(before:)` deleted, if it ever deleted one.
    static func purgeWatermark(on connection: any QueryConnection) throws -> HistoryToken? {
        try connection.scalar("SELECT value FROM Z_METADATA WHERE key = 'historyPurged'").int64Value.map { HistoryToken(position: $0) }
    }

    /// Throws `expired` when transactions after `token` were deleted.
    private func checkNotExpired(_ token: HistoryToken?, connection: any QueryConnection) throws {
        guard let purged = try Self.purgeWatermark(on: connection) else { return }
        if (token?.position ?? 0) < purged.position {
            throw HistoryError(.expired, "The history after token \(token.map(String.init(describing:)) ?? "nil (the beginning)") was deleted (deleteHistory(before:)) up to transaction \(purged): it cannot say everything that changed since. Fetch the current state again, then follow the history from stack.lastHistoryToken().")
        }
    }

    private func requireHistory() throws {
        guard tracksHistory else {
            throw HistoryError(.notTracked, "This store does not track history: add it with addDatabaseStore(at:tracksHistory: true).")
        }
    }

    /// Reads the transactions after `token` on `db` (the watcher's own connection, which the
    /// statement trace does not see) and hands those other stacks wrote, with what they
    /// changed as stored now, to `deliver`; returns the token to continue from (own
    /// transactions included).
    ///
    /// All of it under the state lock, like `withCommittedView`: the snapshot and the overlay
    /// match, and no commit of this process can be queued between the read and the hand-over,
    /// so main contexts receive the remote values before any later local commit, as the store
    /// will hold them.
    ///
    /// The watcher's connection sees the writer's commits as another connection's, so most
    /// wake-ups follow this stack's own commits: a first read, without the lock, moves past
    /// those alone.
    func deliverRemoteTransactions(after token: HistoryToken?, on db: Connection, _ deliver: ([RemoteTransaction]) -> Void) throws -> HistoryToken? {
        let (othersWrote, last) = try db.readTransaction {
            try checkNotExpired(token, connection: db)
            return try HistoryReading.othersWrote(after: token, connection: db, queries: Self.historyQueries, instance: instance)
        }
        guard othersWrote else { return last }
        // Reported once the state lock is released (`onError` may read), and only once the
        // read succeeded: a failed one is made again, and would report them twice.
        var unreadable: [StoreError] = []
        let next = try state.withLock { state in
            try db.readTransaction {
                // The snapshot starts here, under the lock, with the overlay taken.
                _ = try db.scalar("SELECT 1 FROM sqlite_master LIMIT 1")
                var reader = RowReader(session: ReadSession(graph: graph, connection: db, overlay: state.overlay), context: nil)
                try checkNotExpired(token, connection: db)
                return try HistoryReading.deliverRemote(after: token, reader: &reader, queries: Self.historyQueries, instance: instance,
                                                        unreadable: { unreadable.append($0) }, deliver)
            }
        }
        unreadable.forEach(reportError)
        return next
    }

    /// The newest transaction's token, read on `db`.
    static func lastHistoryToken(on db: any QueryConnection) throws -> HistoryToken? {
        try db.scalar("SELECT max(Z_TOKEN) FROM Z_HISTORY").int64Value.map { HistoryToken(position: $0) }
    }

    package func followHistory(_ deliver: @escaping @Sendable ([RemoteTransaction]) -> Void) throws {
        guard tracksHistory, let url = parts.first?.url else { return }
        let watcher = try SQLiteHistoryWatcher(store: self, url: url, deliver: deliver)
        watchers.withLock { $0.append(watcher) }
        watcher.start()
    }
}

/// Notices commits that other connections — other processes, other stacks — make to a store
/// file, and delivers them from the history.
///
/// Every `pollInterval` it reads `PRAGMA data_version` on an idle connection of its own: SQLite
/// changes the number when another connection commits, and never for this connection's own
/// reads, and it costs no file access while nothing changed (the number comes from the shared
/// memory index). Outside a read transaction, as SQLite requires for the number to move. When
/// it changed, the watcher reads the history after its last token, on the same connection, in
/// one read of the store (with this process's queued commits on top) and hands over what other
/// stacks wrote. Its statements are not in `stack.trace`.
///
/// A number counts as seen only once the history after it was read: a read that fails (the
/// file busy longer than the busy timeout, say) is made again at the next poll, not left for
/// some later commit to trigger. The first error of a run of failures goes to `onError`.
///
/// `@unchecked Sendable`: `dataVersion`, `last` and `failing` are used only on `queue` after
/// `init`; the rest is immutable (the connection is used only on `queue` too).
final class SQLiteHistoryWatcher: @unchecked Sendable {
    /// How often the watcher looks: the latency of a remote commit is about half of it plus
    /// the read (Docs/History.md).
    static let pollInterval: DispatchTimeInterval = .milliseconds(10)

    private weak var store: SQLiteStore?
    private let queue = DispatchQueue(label: "ContextStack.SQLiteStore.history", qos: .userInitiated)
    private let timer: any DispatchSourceTimer
    private let connection: Connection
    /// The `data_version` whose history was read.
    private var dataVersion: Int64?
    private var last: HistoryToken?
    /// Whether the last poll failed (its error was reported; the next ones of the run are not).
    private var failing = false
    private let deliver: @Sendable ([RemoteTransaction]) -> Void
    /// How many of the next history reads fail as a file busy beyond the busy timeout would:
    /// the tests' way to make the failure this watcher must ride out.
    let failingReads = Locked(0)

    /// A watcher that delivers what is committed after the call: the newest transaction now
    /// is where it starts (read on its own connection, after `data_version`, so nothing
    /// committed in between is missed).
    init(store: SQLiteStore, url: URL, deliver: @escaping @Sendable ([RemoteTransaction]) -> Void) throws {
        self.store = store
        self.deliver = deliver
        connection = try Connection(path: url.path, readOnly: true, create: false)
        connection.setBusyTimeout(milliseconds: SQLiteStore.busyTimeout)
        dataVersion = try connection.scalar("PRAGMA data_version").int64Value
        last = try SQLiteStore.lastHistoryToken(on: connection)
        // Made last: a watcher whose start failed has no timer to release (libdispatch traps on
        // releasing a source that was never resumed).
        timer = DispatchSource.makeTimerSource(queue: queue)
    }

    func start() {
        timer.schedule(deadline: .now() + Self.pollInterval, repeating: Self.pollInterval, leeway: .milliseconds(2))
        timer.setEventHandler { [weak self] in self?.poll() }
        timer.resume()
    }

    func stop() { timer.cancel() }

    /// Lets go of `watchers` (this one among them), then of `connection` — the store's writer,
    /// which must close after their read-only connections (`SQLiteStore.deinit`) — on this
    /// watcher's queue, after any look it is in the middle of.
    func letGo(_ watchers: [SQLiteHistoryWatcher], thenClose connection: Connection) {
        let held = Locked<[SQLiteHistoryWatcher]?>(watchers)
        let writer = Locked<Connection?>(connection)
        for watcher in watchers { watcher.stop() }
        queue.async {
            held.withLock { $0 = nil }
            writer.withLock { $0 = nil }
        }
    }

    deinit { timer.cancel() }

    private func poll() {
        guard let store else {
            timer.cancel()
            return
        }
        do {
            let version = try connection.scalar("PRAGMA data_version").int64Value
            guard version != dataVersion else { return }
            if failingReads.withLock({ count in defer { count = max(count - 1, 0) }; return count > 0 }) {
                throw SQLiteError(code: .busy, message: "database is locked (a failure the tests asked for)")
            }
            last = try store.deliverRemoteTransactions(after: last, on: connection, deliver)
            dataVersion = version
            failing = false
        } catch let error as HistoryError where error.code == .expired {
            // Deleted before this watcher read it: what changed cannot be known. Go on from
            // the last deleted transaction, so every one the purge kept is delivered, and say so.
            if let purged = try? SQLiteStore.purgeWatermark(on: connection) { last = purged }
            store.reportError(error)
        } catch {
            if !failing { store.reportError(error) }
            failing = true
        }
    }
}
