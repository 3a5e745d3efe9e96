import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackPostgres
#if canImport(Glibc)
import Glibc
#endif

// Persistent history on PostgreSQL (Docs/History.md). Each commit writes, in its transaction,
// one `Z_HISTORY` row, its changes in one blob (`HistoryEncoding`), and `pg_notify` rings
// the doorbell (`HistoryDoorbell`). Several machines commit at once, and PostgreSQL hands out transaction IDs and
// sequence values in start order, not commit order: a reader that returned transaction 101
// could later meet 100, committed after. So a transaction is returned only once every
// transaction with a lower ID has ended — its ID is below the oldest still running
// (`pg_snapshot_xmin`) — and tokens order transactions by ID: nothing can ever appear before
// a token already handed out.

extension PostgresStore {
    /// The name of the channel the doorbell rings on, computed once per store: one per schema,
    /// so that stores in other schemas of the database (several apps, or tests) do not wake
    /// this one's listener.
    static let historyChannelSQL = "SELECT 'cs_history_' || left(md5(current_schema()), 16)"

    /// One row per commit: the transaction's ID and the commit's number in the writing
    /// process's queue (a transaction can hold several commits, numbered in the order written),
    /// and the commit's changes in one blob.
    static let historyCreation = [
        "CREATE TABLE IF NOT EXISTS \"Z_HISTORY\" (\"Z_XID\" bigint NOT NULL, \"Z_SEQ\" bigint NOT NULL, \"Z_DATE\" double precision NOT NULL, \"Z_AUTHOR\" text, \"Z_ORIGIN\" bigint NOT NULL, \"Z_STACK\" text NOT NULL, \"Z_CHANGES\" bytea NOT NULL, PRIMARY KEY (\"Z_XID\", \"Z_SEQ\"))",
    ]

    /// A commit's history row, its transaction's ID filled in by the server. Made once: written
    /// at each commit, the interpolation was six appends a commit.
    static let historyInsert = "INSERT INTO \"Z_HISTORY\" VALUES (\(ownTransaction), ?, ?, ?, ?, ?, ?)"

    /// The lowest transaction ID still running when the reading statement's snapshot was taken:
    /// every transaction below it has ended.
    static let settled = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
    /// The running transaction's own ID (assigned now if it had none).
    static let ownTransaction = "pg_current_xact_id()::text::bigint"

    static let historyQueries = HistoryQueries(
        headers: "SELECT \"Z_XID\", \"Z_SEQ\", \"Z_DATE\", \"Z_AUTHOR\", \"Z_STACK\" FROM \"Z_HISTORY\" WHERE (\"Z_XID\", \"Z_SEQ\") > (?, ?) AND \"Z_XID\" < \(settled) ORDER BY \"Z_XID\", \"Z_SEQ\"",
        transactions: "SELECT \"Z_XID\", \"Z_SEQ\", \"Z_DATE\", \"Z_AUTHOR\", \"Z_STACK\", \"Z_CHANGES\" FROM \"Z_HISTORY\" WHERE (\"Z_XID\", \"Z_SEQ\") > (?, ?) AND \"Z_XID\" < \(settled) ORDER BY \"Z_XID\", \"Z_SEQ\"",
        arguments: { [.integer($0?.position ?? 0), .integer($0?.sequence ?? 0)] })

    /// Creates the history table when asked to, and says whether the database tracks history:
    /// once one stack turned it on, every stack that opens the database writes it. Runs inside
    /// the schema installer's transaction, under its lock (`PostgresSchemaInstaller.install`),
    /// so that a store added with history is all there or not at all.
    static func prepareHistory(_ connection: PostgresConnection, enable: Bool) throws -> Bool {
        if enable {
            for statement in historyCreation { try connection.execute(statement) }
            return true
        }
        return try connection.scalar("SELECT CASE WHEN to_regclass('\"Z_HISTORY\"') IS NULL THEN 0 ELSE 1 END") == .integer(1)
    }

    /// Queues the commit's history row with its statements: no round trip of its own. The
    /// doorbell is decided once the transaction's commits are all queued (`ringDue`). The
    /// token is the server's (the transaction's ID), so a local commit learns none.
    package func writeHistory(_ changes: [HistoryChange], info: CommitInfo, sequence: UInt64, writer: inout PostgresConnection) throws -> HistoryToken? {
        guard tracksHistory else { return nil }
        try writer.enqueue(Self.historyInsert,
                           [.integer(Int64(bitPattern: sequence)), .double(Date().timeIntervalSince1970), info.author.map(Value.text) ?? .null,
                            .integer(Int64(bitPattern: info.origin)), .text(instance), .blob(HistoryEncoding.encode(changes))])
        doorbell.withLock { $0.recorded() }
        return nil
    }

    /// What the doorbell does at the end of a write transaction that recorded history
    /// (`HistoryDoorbell`), decided once its commits are all queued: `queueRing` then queues
    /// it after them, outside their savepoints — a ring queued with one commit of a group
    /// would be rolled back with it, and the commits that waited for that ring would wait for
    /// the listeners' catch-up. `nil` when the transaction recorded none.
    func ringDue() -> HistoryDoorbell.CommitRing? {
        guard tracksHistory else { return nil }
        return doorbell.withLock { $0.transactionEnds(at: DispatchTime.now().uptimeNanoseconds) }
    }

    /// Queues `ring` on the writer, or schedules it. Queuing may settle the statements before
    /// it (a first ring on a new connection, a full pipeline) and throw their error: the
    /// transaction fails, and its `ringLost` owes the ring.
    func queueRing(_ ring: HistoryDoorbell.CommitRing?, writer: PostgresConnection) throws {
        switch ring {
        case .ring?: try writer.enqueue(Self.ring, [.text(historyChannel), .text(instance)])
        case .schedule(let delay)?: scheduleRing(in: delay)
        case .owed?, nil: break
        }
    }

    /// The write transaction failed, after it queued `ring` or before: its own commits are not
    /// stored, but the commits that waited for its ring (written in earlier transactions) wait
    /// again, for a ring scheduled now if none is.
    func ringLost(_ ring: HistoryDoorbell.CommitRing?) {
        guard tracksHistory,
              let delay = doorbell.withLock({ $0.ringLost(ring, at: DispatchTime.now().uptimeNanoseconds) })
        else { return }
        scheduleRing(in: delay)
    }

    /// Rings the history channel, naming the stack that rang.
    private static let ring = "SELECT pg_notify(?, ?)"

    /// Makes sure a ring follows the commits that did not ring: a later commit's, or, when
    /// none rings by the time one is due, one sent alone on the writer's queue (after the
    /// transaction that wrote them). A ring that cannot be sent (the server went away) is not
    /// reported: listeners catch up by themselves.
    private func scheduleRing(in delay: UInt64) {
        writeQueue.asyncAfter(deadline: .now() + .nanoseconds(Int(delay))) { [weak self] in
            guard let self else { return }
            switch self.doorbell.withLock({ $0.owedRing(at: DispatchTime.now().uptimeNanoseconds) }) {
            case .none:
                return
            case .later(let delay):
                self.scheduleRing(in: delay)
            case .now:
                try? self.writeTransaction({ writer in
                    try writer.enqueue(Self.ring, [.text(self.historyChannel), .text(self.instance)])
                }, commit: { commit in try commit() })
            }
        }
    }

    /// Read in one snapshot (the expiry check and the rows agree), on a reader: not under the
    /// store's state lock, which every commit and every read's start takes — a consumer
    /// catching up on a day of history held them all up while its rows came and were decoded.
    /// History needs no overlay of queued commits: only what is committed has a row.
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

    /// The newest settled transaction's token, read on `connection`.
    static func lastHistoryToken(on connection: any QueryConnection) throws -> HistoryToken? {
        var token: HistoryToken?
        try connection.select("SELECT \"Z_XID\", \"Z_SEQ\" FROM \"Z_HISTORY\" WHERE \"Z_XID\" < \(settled) ORDER BY \"Z_XID\" DESC, \"Z_SEQ\" DESC LIMIT 1", []) { row in
            token = HistoryToken(position: row.int64(0), sequence: row.int64(1))
        }
        return token
    }

    package func deleteHistory(before token: HistoryToken) throws {
        try requireHistory()
        let connection = try PostgresConnection(settings)
        try connection.execute(Self.beginWrite)
        do {
            var last: HistoryToken?
            try connection.query("SELECT \"Z_XID\", \"Z_SEQ\" FROM \"Z_HISTORY\" WHERE (\"Z_XID\", \"Z_SEQ\") < (?, ?) ORDER BY \"Z_XID\" DESC, \"Z_SEQ\" DESC LIMIT 1",
                                 [.integer(token.position), .integer(token.sequence)]) { row in
                last = HistoryToken(position: row.int64(0), sequence: row.int64(1))
            }
            if let last {
                let bound: [Value] = [.integer(last.position), .integer(last.sequence)]
                try connection.run("DELETE FROM \"Z_HISTORY\" WHERE (\"Z_XID\", \"Z_SEQ\") <= (?, ?)", bound)
                // Under a row lock, so two purges at once keep the later watermark.
                try connection.run("INSERT INTO \"Z_METADATA\" (key, value) VALUES ('historyPurged', '0.0') ON CONFLICT DO NOTHING")
                var purged = HistoryToken(position: 0)
                try connection.query("SELECT value FROM \"Z_METADATA\" WHERE key = 'historyPurged' FOR UPDATE") { row in
                    purged = Self.token(row.value(0).stringValue) ?? purged
                }
                let kept = max(purged, last)
                try connection.run("UPDATE \"Z_METADATA\" SET value = ? WHERE key = 'historyPurged'", [.text("\(kept.position).\(kept.sequence)")])
            }
            try connection.execute("COMMIT")
        } catch {
            if connection.isInTransaction && !connection.isBroken { try? connection.execute("ROLLBACK") }
            throw error
        }
    }

    /// A token written as `position.sequence`.
    private static func token(_ text: String?) -> HistoryToken? {
        guard let parts = text?.split(separator: "."), parts.count == 2, let position = Int64(parts[0]), let sequence = Int64(parts[1]) else { return nil }
        return HistoryToken(position: position, sequence: sequence)
    }

    /// The newest transaction `deleteHistory(before:)` deleted, if it ever deleted one.
    static func purgeWatermark(on connection: any QueryConnection) throws -> HistoryToken? {
        guard let purged = token(try connection.scalar("SELECT value FROM \"Z_METADATA\" WHERE key = 'historyPurged'").stringValue),
              purged.position > 0 else { return nil }
        return purged
    }

    /// Throws `expired` when transactions after `token` were deleted.
    private func checkNotExpired(_ token: HistoryToken?, connection: any QueryConnection) throws {
        guard let purged = try Self.purgeWatermark(on: connection) else { return }
        if token.map({ $0 < purged }) ?? true {
            throw HistoryError(.expired, "The history after token \(token.map(String.init(describing:)) ?? "nil (the beginning)") was deleted (deleteHistory(before:)) up to transaction \(purged): it cannot say everything that changed since. Fetch the current state again, then follow the history from stack.lastHistoryToken().")
        }
    }

    private func requireHistory() throws {
        guard tracksHistory else {
            throw HistoryError(.notTracked, "This store does not track history: add it with addPostgresStore(url:tracksHistory: true).")
        }
    }

    /// Reads the transactions after `token` on `connection` (the listener's own, which the
    /// statement trace does not see) and hands those other stacks wrote, with what they
    /// changed as stored now, to `deliver`, under the state lock (see `SQLiteStore`'s);
    /// returns the token to continue from.
    ///
    /// A catch-up finds nothing new, or only this stack's own commits, far more often than
    /// another's: a first read, without the lock, moves past those alone.
    func deliverRemoteTransactions(after token: HistoryToken?, on connection: PostgresConnection,
                                   _ deliver: ([RemoteTransaction]) -> Void) throws -> HistoryToken? {
        let (othersWrote, last) = try Self.readTransaction(connection) {
            try checkNotExpired(token, connection: connection)
            return try HistoryReading.othersWrote(after: token, connection: connection, queries: Self.historyQueries, instance: instance)
        }
        guard othersWrote else { return last }
        // Reported once the state lock is released (`onError` may read), and only once the
        // read succeeded: a failed one is made again, and would report them twice.
        var unreadable: [StoreError] = []
        let next = try readingAgainOnLockTimeout {
            unreadable = []
            return try state.withLock { state in
                try Self.readTransaction(connection, begin: Self.beginReadUnderStateLock) {
                    var reader = RowReader(session: ReadSession(graph: graph, connection: connection, overlay: state.overlay), context: nil)
                    try checkNotExpired(token, connection: connection)
                    // Delivered only once every transaction is read: a read failing on a lock
                    // timeout runs again.
                    return try HistoryReading.deliverRemote(after: token, reader: &reader, queries: Self.historyQueries, instance: instance,
                                                            unreadable: { unreadable.append($0) }, deliver)
                }
            }
        }
        unreadable.forEach(reportError)
        return next
    }

    /// Runs `body` in one read-only transaction on `connection`, its snapshot taken at once.
    private static func readTransaction<T>(_ connection: PostgresConnection, begin: String = beginRead, _ body: () throws -> T) throws -> T {
        try connection.execute(begin)
        defer { if connection.isInTransaction && !connection.isBroken { try? connection.execute("COMMIT") } }
        return try body()
    }

    /// A connection listening on this store's history channel.
    func listeningConnection() throws -> PostgresConnection {
        let connection = try PostgresConnection(settings)
        try connection.execute("LISTEN \(historyChannel.quotedIdentifier)")
        return connection
    }

    package func followHistory(_ deliver: @escaping @Sendable ([RemoteTransaction]) -> Void) throws {
        guard tracksHistory else { return }
        let listener = try PostgresHistoryListener(store: self, after: startOfFollowing(), deliver: deliver)
        listeners.withLock { $0.append(listener) }
        listener.start()
    }
}

/// When a store rings the history channel (`pg_notify`): every ring wakes every listener of
/// the database, this process's own included, which costs each of them a server process's and
/// a thread's wake-up — at one ring per commit, a third of a one-object commit's time on a
/// 2-core machine. So a store rings at most once per `interval` with its commits: the first
/// commit after a quiet interval rings in its own transaction (no added delay), later ones
/// within the interval wait for a ring. The next commit an interval after the last ring
/// carries it; if none comes within an interval of the first commit that waits, a ring goes
/// out alone after their transactions. A ring alone is a transaction of its own (PostgreSQL
/// gives a transaction that notifies an ID, so its `COMMIT` waits for the disk), which the
/// next commit waits behind on the writer's connection: under a steady stream of commits
/// closer together than the interval, every ring now rides with a commit.
///
/// Every commit thus rings in its own transaction or is rung for within `interval`; a remote
/// stack hears of a commit at most `interval` later than otherwise, and a ring that is lost
/// (the process ended first, the server went away) only delays delivery to the listener's
/// catch-up.
struct HistoryDoorbell {
    /// At most one ring per interval: 2 ms.
    static let interval: UInt64 = 2_000_000
    /// When the last ring was sent or queued (monotonic nanoseconds); `nil` before the first.
    private var lastRing: UInt64?
    /// When the first commit that waits for a ring was made; `nil` when none waits.
    private var firstWaiting: UInt64?
    /// Whether a deferred ring is scheduled.
    private var scheduled = false
    /// Whether the write transaction under way recorded history (`recorded`).
    private var recordedInTransaction = false

    enum CommitRing: Equatable {
        /// The transaction rings. Should it fail, the commits that waited for a ring since
        /// `waiting` (if any did) wait again: `ringLost`.
        case ring(waiting: UInt64?)
        /// The commit waits for a later ring; none is scheduled yet: schedule one in this many
        /// nanoseconds.
        case schedule(UInt64)
        /// The commit waits for the ring already scheduled.
        case owed
    }

    /// The write transaction under way recorded a commit's history.
    mutating func recorded() { recordedInTransaction = true }

    /// What the write transaction ending at `now` does (`commit(at:)`), if it recorded history
    /// since the last call; `nil` if it recorded none.
    mutating func transactionEnds(at now: UInt64) -> CommitRing? {
        guard recordedInTransaction else { return nil }
        recordedInTransaction = false
        return commit(at: now)
    }

    /// What a commit at `now` does: ring in its transaction when the last ring is an interval
    /// old (that ring is for every commit before it too), or wait for a later one.
    mutating func commit(at now: UInt64) -> CommitRing {
        guard let lastRing, now &- lastRing < Self.interval else {
            let waiting = firstWaiting
            self.lastRing = now
            firstWaiting = nil
            return .ring(waiting: waiting)
        }
        if firstWaiting == nil { firstWaiting = now }
        guard !scheduled else { return .owed }
        scheduled = true
        return .schedule(Self.interval)
    }

    /// The write transaction failed after `commit(at:)` said what it does (`ring`), or before
    /// (`nil`). A ring it was to send (`.ring(waiting:)`) never went: the next commit rings
    /// (a retry of the transaction, say), and the commits that waited for it since `waiting`
    /// wait again. Returns the delay after which to ring for them when no ring is scheduled
    /// (at once, or when the first of them has waited an interval); `nil` when one is, or
    /// none waited.
    mutating func ringLost(_ ring: CommitRing?, at now: UInt64) -> UInt64? {
        recordedInTransaction = false
        guard case .ring(let since)? = ring else { return nil }
        lastRing = nil
        guard let waiting = since else { return nil }
        firstWaiting = min(firstWaiting ?? waiting, waiting)
        guard !scheduled else { return nil }
        scheduled = true
        let due = firstWaiting! &+ Self.interval
        return due > now ? due &- now : 0
    }

    enum DeferredRing: Equatable {
        /// No commit waits: a later one rang for them.
        case none
        /// Commits wait, and their ring is due in this many nanoseconds.
        case later(UInt64)
        /// Ring now, alone.
        case now
    }

    /// What the scheduled ring does at `now`: nothing if a commit rang since, ring alone once
    /// the first commit that waits has waited an interval.
    mutating func owedRing(at now: UInt64) -> DeferredRing {
        guard let firstWaiting else {
            scheduled = false
            return .none
        }
        if now &- firstWaiting < Self.interval { return .later(firstWaiting &+ Self.interval &- now) }
        scheduled = false
        self.firstWaiting = nil
        lastRing = now
        return .now
    }
}

/// Follows the transactions other processes and machines write to a PostgreSQL store.
///
/// A thread of its own (waiting on a socket must not hold a thread of Swift's cooperative
/// pool) keeps a connection that `LISTEN`s on the history channel and waits on its socket.
/// A notification from another stack — or `catchUpInterval` without one — makes it read the
/// history after its last token: the notification is only a doorbell, the history is the
/// truth, so a lost notification, a transaction held back by an older one still running, or a
/// reconnect after the server went away delays a change and never loses it.
///
/// The thread opens its connection itself (a `MainContext` made on the main actor does not
/// wait for it), and reads the history as soon as it listens, for what was committed between
/// the start and then; the same after every reconnect.
///
/// Its reads run on its own connection, which the statement trace does not see. Notifications
/// carry the writing stack's instance: when only this stack's own commits rang, it reads
/// nothing — until the catch-up is due, which they never push back, so another stack's
/// transaction held back at one read is read at the next catch-up however often this stack
/// commits meanwhile.
///
/// `@unchecked Sendable`: `last` and `connection` are used by the listener's thread only;
/// `store` is weak and set once; the pipe's descriptors are immutable, and written to only.
final class PostgresHistoryListener: @unchecked Sendable {
    /// How long the listener waits for another stack's notification before it reads the
    /// history anyway, in milliseconds.
    static let catchUpInterval: UInt64 = 500

    private weak var store: PostgresStore?
    private let instance: String
    private var last: HistoryToken?
    /// The listening connection; `nil` until the thread opens it, and after it broke.
    private var connection: PostgresConnection?
    private let deliver: @Sendable ([RemoteTransaction]) -> Void
    /// A pipe whose write end `stop()` writes to, to wake the thread at once.
    private let wake: (read: Int32, write: Int32)

    /// A listener that delivers the transactions after `start` (the newest settled one when
    /// following began).
    init(store: PostgresStore, after start: HistoryToken?, deliver: @escaping @Sendable ([RemoteTransaction]) -> Void) throws {
        self.store = store
        self.instance = store.instance
        self.deliver = deliver
        last = start
        var descriptors: [Int32] = [0, 0]
        guard pipe(&descriptors) == 0 else { throw StoreError(.cannotOpen, "Cannot start following the history: no pipe (\(String(cString: strerror(errno)))).") }
        wake = (descriptors[0], descriptors[1])
    }

    deinit {
        close(wake.read)
        close(wake.write)
    }

    func start() {
        let thread = Thread { [self] in run() }
        thread.name = "ContextStack.PostgresStore.history"
        thread.start()
    }

    /// Ends the thread now (the store is going away): it closes its connection at once.
    func stop() {
        var byte: UInt8 = 1
        _ = write(wake.write, &byte, 1)
    }

    /// Until the store is gone: listen, wait, read.
    private func run() {
        var failures = 0
        /// When the history is read even if no other stack rings (monotonic nanoseconds).
        var catchUp: UInt64 = 0
        // The store is held only while it is used, never while the thread waits: its deinit
        // must be able to run (and stop this thread) at any time.
        while store != nil {
            do {
                if connection == nil || connection?.isBroken == true {
                    guard let fresh = try store?.listeningConnection() else { return }
                    connection = fresh
                    // Listening now: read what was committed before.
                } else if let listening = connection {
                    // Rings that came in with the last read's results wait in libpq's buffer,
                    // not on the socket.
                    var rang = try listening.takeNotifications()
                    if rang.isEmpty {
                        let now = DispatchTime.now().uptimeNanoseconds
                        let wait = catchUp > now ? Int32(clamping: (catchUp - now) / 1_000_000 + 1) : 0
                        var descriptors = [pollfd(fd: listening.socket, events: Int16(POLLIN), revents: 0),
                                           pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
                        _ = poll(&descriptors, 2, wait)
                        if descriptors[1].revents != 0 { return }
                        rang = try listening.takeNotifications()
                    }
                    // Nothing, or only this stack's own commits, rang: nothing to read before
                    // the catch-up is due.
                    if rang.allSatisfy({ $0 == instance }) && DispatchTime.now().uptimeNanoseconds < catchUp { continue }
                }
                guard let store, let connection else { return }
                last = try store.deliverRemoteTransactions(after: last, on: connection, deliver)
                catchUp = DispatchTime.now().uptimeNanoseconds + Self.catchUpInterval * 1_000_000
                failures = 0
            } catch let error as HistoryError where error.code == .expired {
                // Deleted before this listener read it: what changed cannot be known. Go on
                // from the last deleted transaction, so every one the purge kept is delivered
                // (also one held back now), and say so.
                if let purged = try? connection.flatMap({ try PostgresStore.purgeWatermark(on: $0) }) { last = purged }
                store?.reportError(error)
            } catch {
                // The server went away, or refused: try again, less and less often (up to every
                // few seconds), and catch up from the last token — nothing is lost, so a lost
                // connection is not reported (the app hears of it from its own reads and
                // saves); anything else is, once.
                let lostConnection = (error as? PostgresError)?.code.isConnectionFailure == true
                if failures == 0 && !lostConnection { store?.reportError(error) }
                failures += 1
                connection = nil
                var descriptor = pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)
                if poll(&descriptor, 1, Int32(min(failures, 50)) * 100) > 0 { return }
            }
        }
    }
}
