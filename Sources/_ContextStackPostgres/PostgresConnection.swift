import _ContextStackCore
import CLibpq
import Foundation

/// One libpq connection: a handle plus its cache of prepared statements.
///
/// Like SQLite's `Connection`, it is synchronous and not thread-safe, and says so by not being
/// `Sendable`: whoever owns it (a pool, a writer) hands it to one caller at a time, on a thread
/// of its own, never on Swift's cooperative pool. Its state has no run-time exclusivity checks
/// (`@exclusivity(unchecked)`) for that reason: one caller at a time, and none of its methods
/// calls out while it changes that state; the checks were some thirty look-ups in the
/// thread's access set a one-object commit.
///
/// Statements take `?` placeholders, as everywhere else in ContextStack; they become `$1`,
/// `$2`, … once, when the statement is prepared (`PostgresPlaceholders`). Values are sent with
/// explicit types, text in text format, `int8`, `float8` and `bytea` in binary
/// (`PostgresParameters`); results come back in text format, read by their column types
/// (`PostgresRow`).
package final class PostgresConnection {
    package let handle: OpaquePointer
    package let settings: PostgresSettings
    /// Prepared statements by SQL and argument types: their server-side names.
    @exclusivity(unchecked) private var statements: [StatementKey: String] = [:]
    @exclusivity(unchecked) private var statementCount = 0
    /// The statements named last, looked through before `statements`: a commit runs the same
    /// few texts again and again, most of them the very strings of the time before, which
    /// compare by identity. Looking each up in `statements` hashed its whole text, 1.2 k
    /// instructions a statement and six statements a one-object commit. As SQLite's
    /// connection does, and written out as there: a generic ring shared by the two, even
    /// `@inlinable`, was called unspecialized (+ 600 instructions a small query on SQLite).
    @exclusivity(unchecked) private var recent: [(key: StatementKey, name: String)] = []
    @exclusivity(unchecked) private var nextRecent = 0
    private static let recentCount = 8
    /// The arguments of the statement being sent (`prepared`): one buffer for all statements.
    @exclusivity(unchecked) private var parameters = PostgresParameters()
    /// Receives the SQL of every statement the connection runs (`Stack.trace`), values never.
    @exclusivity(unchecked) package var tracer: StatementTracer?
    /// How many prepared statements (`run`, `query`) the connection has run.
    @exclusivity(unchecked) package private(set) var preparedStatementsRun = 0
    /// How many times the connection has waited for the server's answer since it connected:
    /// each statement run alone, each prepare, each pipeline, each answer read of what `send`
    /// sent (for the tests of what a save costs; Docs/Postgres.md).
    @exclusivity(unchecked) package private(set) var roundTrips = 0
    /// A statement sent with `send` whose answer has not been read yet.
    @exclusivity(unchecked) private var unanswered: String?
    /// A `BEGIN` that goes out with the next statement, in the same round trip (`beginLater`).
    @exclusivity(unchecked) private var pendingBegin: String?
    /// Asked once a `query`'s result has arrived — the server took the statement's snapshot
    /// when it ran it — before any row reaches the caller, whether that snapshot is the one
    /// the read wants; `false` abandons the query with `SnapshotMoved` and sets
    /// `mustReadAgain`. Inside a transaction it is asked once (its first statement fixed the
    /// snapshot of a repeatable-read transaction); outside one, of every statement. A store's
    /// read sets it and clears it.
    @exclusivity(unchecked) package var snapshotCheck: (() -> Bool)?
    /// Whether a query was abandoned since the read that set `snapshotCheck` began, so that
    /// nothing of it was used and the read can run again: its snapshot was not the one wanted,
    /// or the connection turned out broken (a server restart) before the statement was answered.
    @exclusivity(unchecked) package var mustReadAgain = false
    /// Past this many prepared statements the cache starts over (`DEALLOCATE ALL`), as
    /// SQLite's does: generated SQL varies and must not grow the server's memory without bound.
    package static let statementCacheLimit = 512

    /// Milliseconds the connection waits for the server's next answer before it takes the
    /// server as hung (`hungServer`), or `nil` to wait for as long as it takes: the session's
    /// statement timeout plus `PostgresSettings.hungServerMargin`, none when the statement
    /// timeout is 0. The server cancels a statement at its timeout and says so; one that has not
    /// answered well after it is a server process that stopped (a disk that hangs, a process
    /// stopped), which neither TCP keepalives (its machine still answers) nor the statement
    /// timeout (the server enforces it) find. Whoever turns the statement timeout off for a
    /// while (a migration) sets it to `nil` for that while.
    @exclusivity(unchecked) package var answerLimit: Int?
    /// The session's statement timeout in milliseconds (0 for none), known when it connected:
    /// the settings' own, or the one the URL's options or `PGOPTIONS` set instead.
    package private(set) var statementTimeout: Int

    /// Connects, or throws naming the server without its password.
    /// - Throws: `PostgresError` with a class 08 code when the server cannot be reached.
    package init(_ settings: PostgresSettings) throws(PostgresError) {
        try settings.validate()
        let pairs = settings.keywordsAndValues
        let keywords = pairs.map { strdup($0.0) }
        let values = pairs.map { strdup($0.1) }
        defer {
            keywords.forEach { free($0) }
            values.forEach { free($0) }
        }
        var keywordPointers = keywords.map { UnsafePointer($0) } + [nil]
        var valuePointers = values.map { UnsafePointer($0) } + [nil]
        guard let handle = PQconnectdbParams(&keywordPointers, &valuePointers, 1) else {
            throw PostgresError(code: .cannotConnect, message: "could not connect to \(settings.redactedURL): out of memory")
        }
        guard PQstatus(handle) == CONNECTION_OK else {
            let message = settings.redacting(Self.trimmed(PQerrorMessage(handle)))
            PQfinish(handle)
            throw PostgresError(code: .cannotConnect, message: "could not connect to \(settings.redactedURL): \(message)")
        }
        // Notices ("drop cascades to …", "… does not exist, skipping") are the server talking
        // to a person at a console; libpq would print them on standard error.
        PQsetNoticeProcessor(handle, { _, _ in }, nil)
        self.handle = handle
        self.settings = settings
        // The URL or `PGOPTIONS` may set a statement timeout of their own, which wins: then the
        // server says which one the session has.
        statementTimeout = settings.statementTimeout
        if settings.mayOverrideStatementTimeout(options: pairs.last { $0.0 == "options" }?.1 ?? "") {
            statementTimeout = try readStatementTimeout()
        }
        answerLimit = statementTimeout > 0 ? statementTimeout + settings.hungServerMargin : nil
    }

    /// The session's statement timeout in milliseconds, as the server has it. Its answer is
    /// waited for at most `hungServerMargin`: it comes at once from a server that runs, and
    /// the session's own limit is what is not known yet.
    /// - Throws: `PostgresError` with a class 08 code when the server does not answer.
    package func readStatementTimeout() throws(PostgresError) -> Int {
        let sql = "SELECT setting FROM pg_settings WHERE name = 'statement_timeout'"
        let kept = answerLimit
        answerLimit = settings.hungServerMargin
        defer { answerLimit = kept }
        guard PQsendQuery(handle, sql) == 1 else { throw lostConnection(sql: sql) }
        let result = try answer(sql: sql)
        defer { PQclear(result) }
        try check(result, sql: sql)
        guard PQntuples(result) == 1, let value = Int(String(cString: PQgetvalue(result, 0, 0))) else {
            throw PostgresError(code: .cannotConnect, message: "could not read the statement timeout of the session on \(settings.redactedURL)", sql: sql)
        }
        return value
    }

    deinit {
        PQfinish(handle)
    }

    /// Whether libpq has found the connection broken (the server closed it, or it was reset).
    package var isBroken: Bool { unusable || PQstatus(handle) != CONNECTION_OK }
    /// Set when the connection is left in a state no statement can follow.
    @exclusivity(unchecked) private var unusable = false

    /// Whether the connection is inside a transaction block, idle or failed, or has one
    /// waiting to begin with its next statement. Also true while answers are unread (libpq
    /// then reports a statement in progress), in a transaction or not: `settle()` first.
    package var isInTransaction: Bool {
        if pendingBegin != nil { return true }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// The server process serving this connection (for `pg_terminate_backend`, and for logs).
    package var backendPID: Int32 { PQbackendPID(handle) }
    /// The server's version as PostgreSQL numbers it: 150004 for 15.4.
    package var serverVersion: Int { Int(PQserverVersion(handle)) }
    /// When that process started, as `pg_stat_activity.backend_start` reads as text, once a
    /// user of the connection read it (`readBackendStart`): with the process ID it names this
    /// session on its server after the connection is gone, where the ID alone may since have
    /// gone to another process.
    package private(set) var backendStart: String?

    /// Reads `backendStart`, unless it was read already.
    package func readBackendStart() throws {
        guard backendStart == nil else { return }
        let sql = "SELECT backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        var start: String?
        try query(sql) { row in start = row.value(0).stringValue }
        backendStart = start ?? ""
    }

    /// Runs one or more statements without parameters, through the simple query protocol
    /// (`BEGIN`, `COMMIT`, DDL, several statements separated by `;`).
    ///
    /// A `ROLLBACK` (to a savepoint or of the whole transaction) first reads the answers of the
    /// statements still queued and forgets their errors: it undoes whatever they did.
    package func execute(_ sql: String) throws(PostgresError) {
        if sql.hasPrefix("ROLLBACK") {
            try checkUsable(sql)
            if !queued.isEmpty { _ = try? finishPipeline(keepingLast: false) }
        }
        try settle()
        let text = takingPendingBegin(sql)
        tracer?.emit(sql)
        roundTrips += 1
        guard PQsendQuery(handle, text) == 1 else { throw lostConnection(sql: sql) }
        let result = try answer(sql: sql)
        defer { PQclear(result) }
        try check(result, sql: sql)
    }

    /// Begins a transaction with `begin` (a `BEGIN` statement) without a round trip of its own:
    /// it goes out with the next statement — ahead of it in the same query string, or in one
    /// pipeline with a prepared statement — and fails with it. Until then nothing is sent, and
    /// `isInTransaction` is true; `abandonPendingBegin` forgets it.
    ///
    /// `begin` is one statement; when it goes out in a pipeline, `transactionPreamble` follows it.
    package func beginLater(_ begin: String) {
        precondition(!isInTransaction, "beginLater(_:) on a connection already inside a transaction or with answers unread: end it, or settle(), first.")
        // (Through the bytes: Foundation's `contains` took two microseconds a transaction.)
        precondition(!begin.utf8.contains(UInt8(ascii: ";")), "beginLater(_:) takes one statement: \(begin)")
        pendingBegin = begin
    }

    /// Statements without parameters that follow a `beginLater` `BEGIN` when it goes out in a
    /// pipeline (`enqueue`, a prepared statement), such as a `SET LOCAL` for that transaction
    /// alone — and only then: a `BEGIN` that goes out ahead of a simple-protocol statement
    /// (`execute`, `send`) goes alone. The writer relies on that (`PostgresStore.writeTransaction`).
    @exclusivity(unchecked) package var transactionPreamble: [String] = []

    /// Forgets a `beginLater` that no statement took yet; whether there was one. A transaction
    /// that never began has nothing to commit or roll back.
    package func abandonPendingBegin() -> Bool {
        defer { pendingBegin = nil }
        return pendingBegin != nil
    }

    /// Whether the server is still there, as far as can be told without a round trip: reads
    /// what it sent meanwhile, which shows a connection it closed (a restart, an administrator)
    /// as broken. A machine that vanished without a word is only found by the next statement.
    ///
    /// A server that ends a session sends an error first (`57P01`, which libpq, the connection
    /// being idle, hands to the notice processor) and then closes it; a read that takes the
    /// error does not see the end that follows it, so the socket is read for as long as it has
    /// something (a few times at most). One read left the connection looking alive, and the
    /// writer's next `BEGIN` failed its commit with `57P01`
    /// (`PostgresStoreTests.sessionsTheServerEndsAreReplacedWithoutAnError`).
    package func isAlive() -> Bool {
        guard unanswered == nil && pendingBegin == nil && queued.isEmpty && PQisBusy(handle) == 0 else { return !isBroken }
        var socket = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
        for _ in 0..<4 where !isBroken {
            guard poll(&socket, 1, 0) > 0, PQconsumeInput(handle) == 1 else { break }
            // Parses what came (notices), so that it is not kept for the next statement.
            _ = PQisBusy(handle)
        }
        return !isBroken
    }

    /// `sql` preceded by the pending `BEGIN`, if there is one, which it takes.
    private func takingPendingBegin(_ sql: String) -> String {
        guard let begin = pendingBegin else { return sql }
        pendingBegin = nil
        tracer?.emit(begin)
        return begin + "; " + sql
    }

    /// Runs a statement with `?` placeholders bound to `arguments`, prepared once and reused;
    /// returns the number of rows it inserted, updated or deleted.
    @discardableResult
    package func run(_ sql: String, _ arguments: [Value] = []) throws(PostgresError) -> Int {
        let result = try executePrepared(sql, arguments)
        defer { PQclear(result) }
        return Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    /// Runs a prepared query and hands each row to `body`; the row is valid only during that call.
    package func query(_ sql: String, _ arguments: [Value] = [], expecting: (Int) -> Void = { _ in },
                       _ body: (PostgresRow) throws -> Void) throws {
        guard let result = try executePreparedForRead(sql, arguments) else { throw SnapshotMoved() }
        defer { PQclear(result) }
        if let check = snapshotCheck {
            guard check() else {
                mustReadAgain = true
                throw SnapshotMoved()
            }
            if isInTransaction { snapshotCheck = nil }
        }
        let row = PostgresRow(result: result)
        let count = PQntuples(result)
        expecting(Int(count))
        var index: Int32 = 0
        while index < count {
            row.index = index
            try body(row)
            index += 1
        }
    }

    /// `executePrepared`, or `nil` when the connection broke before the statement was answered
    /// during a read that can run again (`snapshotCheck` set): nothing of it was used.
    private func executePreparedForRead(_ sql: String, _ arguments: [Value]) throws -> OpaquePointer? {
        do {
            return try executePrepared(sql, arguments)
        } catch {
            guard snapshotCheck != nil && isBroken else { throw error }
            mustReadAgain = true
            return nil
        }
    }

    /// Sends statements without parameters (the simple protocol) and returns without waiting
    /// for the answer, which the connection's next use reads first (`settle`): its round trip
    /// overlaps with whatever the caller does meanwhile. For statements whose answer nobody
    /// waits for, such as the `COMMIT` that ends a read.
    package func send(_ sql: String) throws(PostgresError) {
        try settle()
        if pendingBegin == nil, let name = statements[StatementKey(sql: sql, types: [])] {
            // Prepared already (a pipeline prepares `COMMIT`): the server does not parse it
            // again. Not prepared here: in a failed transaction preparing fails too.
            tracer?.emit(sql)
            guard PQsendQueryPrepared(handle, name, 0, nil, nil, nil, 0) == 1 else { throw lostConnection(sql: sql) }
        } else {
            let text = takingPendingBegin(sql)
            tracer?.emit(sql)
            guard PQsendQuery(handle, text) == 1 else { throw lostConnection(sql: sql) }
        }
        unanswered = sql
    }

    /// Reads the answer to what `send` sent, if it is not read yet; throws its error.
    package func settle() throws(PostgresError) {
        try checkUsable(queued.first ?? unanswered ?? "")
        if !queued.isEmpty { _ = try finishPipeline(keepingLast: false) }
        guard let sql = unanswered else { return }
        unanswered = nil
        roundTrips += 1
        guard let result = try answer(sql: sql) else { return }
        defer { PQclear(result) }
        try check(result, sql: sql)
    }

    // MARK: - Prepared statements

    private struct StatementKey: Hashable {
        let sql: String
        let types: [UInt32]

        /// Lengths first: most texts of a commit differ in length, and comparing two different
        /// texts took the string comparison's slow path, thirty times a commit in `recent`.
        static func == (a: StatementKey, b: StatementKey) -> Bool {
            a.sql.utf8.count == b.sql.utf8.count && a.sql == b.sql && a.types == b.types
        }
    }

    /// Prepares `sql` for these argument types on first use, then executes it. A pending
    /// `BEGIN` goes out with it, in one pipeline.
    private func executePrepared(_ sql: String, _ arguments: [Value]) throws(PostgresError) -> OpaquePointer {
        try settle()
        preparedStatementsRun += 1
        if pendingBegin != nil {
            try enqueue(sql, arguments)
            return try finishPipeline(keepingLast: true)!
        }
        let name = try prepared(sql, arguments)
        tracer?.emit(sql)
        roundTrips += 1
        let sent = parameters.withPointers { count, values, lengths, formats in
            PQsendQueryPrepared(handle, name, count, values, lengths, formats, 0)
        }
        guard sent == 1, let result = try answer(sql: sql) else { throw lostConnection(sql: sql) }
        do {
            try check(result, sql: sql)
        } catch {
            PQclear(result)
            throw error
        }
        return result
    }

    /// The server-side name of `sql` prepared for the types of `arguments` (preparing it on
    /// first use); `parameters` holds the arguments as libpq takes them, until the next call.
    /// With `settlingFirst`, a statement to prepare waits for what is outstanding first.
    private func prepared(_ sql: String, _ arguments: [Value], settlingFirst: Bool = false) throws(PostgresError) -> String {
        do {
            try parameters.fill(arguments)
        } catch {
            throw PostgresError(code: error.code, message: error.message, sql: sql)
        }
        return try statementName(sql, types: parameters.types, settlingFirst: settlingFirst)
    }

    /// The server-side name of `sql` prepared for `types`, preparing it on first use.
    private func statementName(_ sql: String, types: [UInt32] = [], settlingFirst: Bool = false) throws(PostgresError) -> String {
        let key = StatementKey(sql: sql, types: types)
        for entry in recent where entry.key == key { return entry.name }
        let name: String
        if let cached = statements[key] {
            name = cached
        } else {
            if settlingFirst { try settle() }
            name = try prepare(key)
        }
        if recent.count < Self.recentCount {
            recent.append((key, name))
        } else {
            recent[nextRecent] = (key, name)
            nextRecent = (nextRecent + 1) % Self.recentCount
        }
        return name
    }

    // MARK: - Pipeline

    /// Sends a statement whose answer nobody needs at once (what a writer inserts, updates and
    /// deletes) without waiting for it: statements queue up in a pipeline, with a pending
    /// `BEGIN` ahead of them, and go out together. Their answers are read by the connection's
    /// next other use, or by `commit()`, which sends `COMMIT` in the same pipeline — a
    /// transaction of such statements is one round trip. The first error among them is thrown
    /// there; those after it did not run, and the transaction is left failed, to roll back.
    ///
    /// Statements are enqueued inside a transaction (after `beginLater`, or once one is open):
    /// outside one, each pipeline's end would commit what came before it.
    package func enqueue(_ sql: String, _ arguments: [Value] = []) throws(PostgresError) {
        if queued.isEmpty {
            try settle()
            precondition(pendingBegin != nil || [PQTRANS_INTRANS, PQTRANS_INERROR].contains(PQtransactionStatus(handle)),
                         "enqueue(_:_:) outside a transaction: call beginLater(_:) or begin one first.")
        }
        // Preparing waits for its answer, which pipeline mode does not allow: the queue goes
        // first (only a statement's first use in the connection's life costs that).
        var name = try prepared(sql, arguments, settlingFirst: true)
        if queued.count >= Self.pipelineDepth { try settle() }
        if queued.isEmpty {
            // `COMMIT` and the `BEGIN` go out prepared too; prepared now, while nothing is
            // queued (and `sql` again: the cache may have started over since it was named).
            // A `BEGIN` the server refuses to prepare is thrown as such; no transaction began.
            // Room for all of them first: a cache starting over between two of them would
            // leave the names taken before it pointing at nothing.
            if statements.count + 3 + transactionPreamble.count >= Self.statementCacheLimit { try startStatementCacheOver() }
            let pending = pendingBegin
            pendingBegin = nil
            commitName = try statementName("COMMIT")
            let begin = try pending.map { begin throws(PostgresError) in (begin, try statementName(begin)) }
            let preamble = try (begin == nil ? [] : transactionPreamble).map { statement throws(PostgresError) in (statement, try statementName(statement)) }
            name = try statementName(sql, types: parameters.types)
            guard PQenterPipelineMode(handle) == 1 else { throw lostConnection(sql: sql) }
            for (statement, name) in (begin.map { [$0] } ?? []) + preamble {
                try sendQueued(statement, name: name)
            }
        }
        try sendQueued(sql, name: name, withArguments: true)
    }

    /// Sends a prepared statement into the open pipeline, with the arguments `prepared` made
    /// last, or with none.
    private func sendQueued(_ sql: String, name: String, withArguments: Bool = false) throws(PostgresError) {
        tracer?.emit(sql)
        queued.append(sql)
        let sent: Int32
        if withArguments {
            sent = parameters.withPointers { count, values, lengths, formats in
                PQsendQueryPrepared(handle, name, count, values, lengths, formats, 0)
            }
        } else {
            sent = PQsendQueryPrepared(handle, name, 0, nil, nil, nil, 0)
        }
        guard sent == 1 else { throw abandonPipeline(sql: sql) }
    }

    /// Ends the transaction with `COMMIT`: in the same round trip as the statements queued
    /// before it, if there are any. A transaction whose `BEGIN` never went out has nothing to
    /// commit.
    /// - Throws: the first queued statement's error (the transaction is then left failed, not
    ///   committed), or `COMMIT`'s own.
    package func commit() throws(PostgresError) {
        if abandonPendingBegin() { return }
        guard !queued.isEmpty, let commitName else { return try execute("COMMIT") }
        try sendQueued("COMMIT", name: commitName)
        _ = try finishPipeline(keepingLast: false)
    }

    /// Statements queued in the pipeline, in order, whose answers are not read yet.
    @exclusivity(unchecked) private var queued: [String] = []
    /// The server-side name of `COMMIT`, prepared when the first pipeline began.
    @exclusivity(unchecked) private var commitName: String?
    /// How many statements go out before their answers are read. Not for fear of a deadlock
    /// (libpq reads what the server sends while it waits to send more), but so that an error
    /// is read, and the statements after it are no longer built and sent, soon enough, and
    /// the list of queued statements stays small.
    static let pipelineDepth = 256

    /// Sends the pipeline's end and reads every queued statement's answer; throws the first
    /// error. With `keepingLast`, returns the last statement's result, which the caller clears.
    private func finishPipeline(keepingLast: Bool) throws(PostgresError) -> OpaquePointer? {
        var statements: [String] = []
        swap(&statements, &queued)
        defer {
            // The list's buffer serves the next pipeline: grown anew each time, it was three
            // allocations a commit.
            if queued.isEmpty {
                statements.removeAll(keepingCapacity: true)
                queued = statements
            }
        }
        let synced = PQpipelineSync(handle) == 1
        roundTrips += 1
        var failure: PostgresError?
        var last: OpaquePointer?
        var answered = 0
        var nulls = 0
        while synced {
            do {
                try awaitAnswer(sql: answered < statements.count ? statements[answered] : "COMMIT")
            } catch {
                last.map { PQclear($0) }
                throw error
            }
            guard let result = PQgetResult(handle) else {
                // A NULL ends each statement's answer; more in a row means the answers stopped
                // coming (the connection broke).
                nulls += 1
                if nulls > 1 && isBroken { break }
                if nulls > 2 { break }
                continue
            }
            nulls = 0
            if PQresultStatus(result) == PGRES_PIPELINE_SYNC {
                PQclear(result)
                break
            }
            guard answered < statements.count else {
                // An answer beyond the last statement's: the connection broke after every
                // statement was answered (what they did stands), and the sync never comes.
                PQclear(result)
                if isBroken { break } else { continue }
            }
            let sql = statements[answered]
            answered += 1
            if failure == nil {
                if PQresultStatus(result) == PGRES_PIPELINE_ABORTED {
                    // Skipped for an error that was not reported: never expected, never ignored.
                    failure = PostgresError(code: .init(rawValue: "XX000"), message: "the statement was skipped in a pipeline that failed", sql: sql)
                } else {
                    do {
                        try check(result, sql: sql)
                    } catch {
                        failure = error
                    }
                }
            }
            if keepingLast && answered == statements.count && failure == nil {
                last = result
            } else {
                PQclear(result)
            }
        }
        // A connection that cannot leave pipeline mode cannot run anything else: it counts as
        // broken, so its owner replaces it.
        if PQexitPipelineMode(handle) != 1 { unusable = true }
        if let failure {
            last.map { PQclear($0) }
            throw failure
        }
        guard synced, answered == statements.count else {
            last.map { PQclear($0) }
            throw lostConnection(sql: answered < statements.count ? statements[answered] : statements.last ?? "")
        }
        return last
    }

    /// After a statement could not be sent: reads what the pipeline answered so far and leaves
    /// it, returning the error to throw.
    /// The connection is left unusable: what of its transaction ran is unknown here, and its
    /// owner replaces it, which ends the transaction on the server.
    private func abandonPipeline(sql: String) -> PostgresError {
        let error = lostConnection(sql: sql)
        _ = try? finishPipeline(keepingLast: false)
        unusable = true
        return error
    }

    private func prepare(_ key: StatementKey) throws(PostgresError) -> String {
        if statements.count >= Self.statementCacheLimit { try startStatementCacheOver() }
        statementCount += 1
        let name = "cs\(statementCount)"
        let text = PostgresPlaceholders.numbered(key.sql)
        roundTrips += 1
        let sent = key.types.withUnsafeBufferPointer { types in
            PQsendPrepare(handle, name, text, Int32(types.count), types.baseAddress)
        }
        guard sent == 1 else { throw lostConnection(sql: key.sql) }
        let result = try answer(sql: key.sql)
        defer { PQclear(result) }
        try check(result, sql: key.sql)
        statements[key] = name
        return name
    }

    /// Deallocates every prepared statement. A transaction waiting to begin (`beginLater`)
    /// keeps waiting: its `BEGIN` goes out with its preamble, in the next pipeline, not ahead
    /// of `DEALLOCATE ALL` without it.
    private func startStatementCacheOver() throws(PostgresError) {
        let pending = pendingBegin
        pendingBegin = nil
        defer { pendingBegin = pending }
        try execute("DEALLOCATE ALL")
        statements.removeAll(keepingCapacity: true)
        recent.removeAll(keepingCapacity: true)
        nextRecent = 0
    }

    // MARK: - Waiting for answers

    /// The answer to the one statement (or simple query) just sent, as `PQexec` gives it: the
    /// last result, or the first error; `nil` when the connection broke.
    private func answer(sql: String) throws(PostgresError) -> OpaquePointer? {
        var kept: OpaquePointer?
        while true {
            do {
                try awaitAnswer(sql: sql)
            } catch {
                kept.map { PQclear($0) }
                throw error
            }
            guard let result = PQgetResult(handle) else { return kept }
            if let previous = kept, PQresultStatus(previous) == PGRES_FATAL_ERROR {
                PQclear(result)
            } else {
                kept.map { PQclear($0) }
                kept = result
            }
            if PQstatus(handle) == CONNECTION_BAD { return kept }
        }
    }

    /// Waits until `PQgetResult` can return without waiting, for at most `answerLimit`:
    /// libpq's own wait has no limit. A server that sends nothing for that long is taken as
    /// hung: the connection is left unusable (its owner closes it, which ends the session's
    /// transaction once the server process runs again) and `hungServer` is thrown.
    ///
    /// Over TLS, part of an answer can wait inside OpenSSL, already read from the socket, which
    /// then looks idle (libpq's own wait asks OpenSSL first): there the socket is polled in
    /// slices, and what TLS holds is taken before and after each.
    private func awaitAnswer(sql: String) throws(PostgresError) {
        guard let limit = answerLimit, PQisBusy(handle) == 1 else { return }
        let tls = PQsslInUse(handle) == 1
        if tls && (PQconsumeInput(handle) != 1 || PQisBusy(handle) == 0) { return }
        let start = DispatchTime.now().uptimeNanoseconds
        var socket = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
        repeat {
            let waited = Int((DispatchTime.now().uptimeNanoseconds - start) / 1_000_000)
            guard waited < limit else {
                unusable = true
                throw hungServer(sql: sql, limit: limit)
            }
            let ready = poll(&socket, 1, Int32(clamping: tls ? min(limit - waited, Self.tlsSlice) : limit - waited))
            if ready < 0 && errno != EINTR { return }
            // Readable (or over TLS, any slice's end), or the socket failed: libpq reads it and
            // tells (a broken connection makes `PQgetResult` return at once).
            if (ready > 0 || tls) && PQconsumeInput(handle) != 1 { return }
        } while PQisBusy(handle) == 1
    }

    /// Milliseconds a wait for an answer over TLS sleeps at most before it asks OpenSSL again.
    private static let tlsSlice = 50

    /// The error of an answer that did not come within `limit` milliseconds.
    private func hungServer(sql: String, limit: Int) -> PostgresError {
        // Only the read of the session's own statement timeout waits for the margin alone.
        let why = limit == settings.hungServerMargin ? "" : " (the statement timeout plus \(settings.hungServerMargin) ms)"
        return PostgresError(code: .connectionLost, message: "no answer from \(settings.redactedURL) within \(limit) ms\(why): the server process is taken as hung and the connection is closed; whether the statement took effect is known only by reading its rows again", sql: sql)
    }

    // MARK: - Errors

    /// Throws the error a result reports, if it reports one.
    private func check(_ result: OpaquePointer?, sql: String) throws(PostgresError) {
        guard let result else { throw lostConnection(sql: sql) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY, PGRES_SINGLE_TUPLE:
            return
        default:
            let state = cs_pq_sqlstate(result).map { String(cString: $0) }
            let message = cs_pq_message(result).map { String(cString: $0) } ?? Self.trimmed(PQresultErrorMessage(result))
            let code: PostgresError.Code = if let state, state.utf8.count == 5 { .init(rawValue: state) } else if isBroken { .connectionLost } else { .init(rawValue: "XX000") }
            throw PostgresError(code: code, message: message,
                                detail: cs_pq_detail(result).map { String(cString: $0) },
                                constraint: cs_pq_constraint(result).map { String(cString: $0) }, sql: sql)
        }
    }

    /// Throws when an earlier failure left the connection in a state no statement can follow
    /// (its owner replaces it: `isBroken` says so).
    private func checkUsable(_ sql: String) throws(PostgresError) {
        if unusable { throw PostgresError(code: .connectionLost, message: "the connection to \(settings.redactedURL) was left unusable by an earlier failure", sql: sql) }
    }

    /// libpq returned no result at all: the connection is gone (or out of memory).
    private func lostConnection(sql: String) -> PostgresError {
        PostgresError(code: .connectionLost, message: "lost the connection to \(settings.redactedURL): \(settings.redacting(Self.trimmed(PQerrorMessage(handle))))", sql: sql)
    }

    // MARK: - Notifications

    /// The connection's socket, to wait on for notifications (`LISTEN`).
    package var socket: Int32 { PQsocket(handle) }

    /// Reads whatever the server sent without waiting, and returns the payloads of the
    /// notifications (`NOTIFY`) that arrived since the last call. Only between statements.
    package func takeNotifications() throws(PostgresError) -> [String] {
        guard PQconsumeInput(handle) == 1 else {
            unusable = true
            throw lostConnection(sql: "LISTEN")
        }
        var payloads: [String] = []
        while let notification = PQnotifies(handle) {
            payloads.append(notification.pointee.extra.map { String(cString: $0) } ?? "")
            PQfreemem(notification)
        }
        return payloads
    }

    /// A libpq message without its trailing newline, or a placeholder for none.
    private static func trimmed(_ message: UnsafePointer<CChar>?) -> String {
        guard let message else { return "no message" }
        let text = String(cString: message).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? "no message" : text
    }
}

extension PostgresConnection: StoreConnection {
    package func execute(_ sql: String, _ arguments: [Value]) throws {
        try run(sql, arguments)
    }

    package func select(_ sql: String, _ arguments: [Value], _ body: (any QueryRow) throws -> Void) throws {
        try query(sql, arguments) { row in try body(row) }
    }

    package func select(_ sql: String, _ arguments: [Value], expecting: (Int) -> Void, _ body: (any QueryRow) throws -> Void) throws {
        try query(sql, arguments, expecting: expecting) { row in try body(row) }
    }
}
