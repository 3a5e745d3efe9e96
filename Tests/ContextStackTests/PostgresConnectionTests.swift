import _ContextStackCore
@testable import _ContextStackPostgres
import CLibpq
import Foundation
import Testing

/// The libpq client under the PostgreSQL store: placeholders, values both ways, errors, and a
/// connection that breaks — against a real server (see `PostgresServer`).
@Suite struct PostgresPlaceholderTests {
    @Test func questionMarksBecomeNumberedParameters() {
        #expect(PostgresPlaceholders.numbered("SELECT ? + ?, ?") == "SELECT $1 + $2, $3")
        #expect(PostgresPlaceholders.numbered("SELECT 1") == "SELECT 1")
        let many = "(" + Array(repeating: "?", count: 12).joined(separator: ", ") + ")"
        #expect(PostgresPlaceholders.numbered(many).hasSuffix("$11, $12)"))
    }

    @Test func quotedTextAndCommentsKeepTheirQuestionMarks() {
        #expect(PostgresPlaceholders.numbered(#"SELECT '?', "a?b", ? FROM "t?""#) == #"SELECT '?', "a?b", $1 FROM "t?""#)
        #expect(PostgresPlaceholders.numbered("SELECT 'it''s ?', ?") == "SELECT 'it''s ?', $1")
        #expect(PostgresPlaceholders.numbered(#"SELECT "a""?", ?"#) == #"SELECT "a""?", $1"#)
        #expect(PostgresPlaceholders.numbered("SELECT ? -- why?\n, ?") == "SELECT $1 -- why?\n, $2")
        #expect(PostgresPlaceholders.numbered("SELECT /* ? */ ?, /*/ ? */ ?") == "SELECT /* ? */ $1, /*/ ? */ $2")
    }
}

/// How the test support finds a server, and what it says when there is none: the suites skip
/// with one line naming the fix, rather than fail, on a machine without PostgreSQL.
@Suite struct PostgresServerDiscoveryTests {
    @Test func withoutServerBinariesTheSuitesSayHowToEnableThem() throws {
        let empty = FileManager.default.temporaryDirectory.appendingPathComponent("cs-nopg-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: empty) }
        #expect(PostgresServer.findBinaries(installed: empty.appendingPathComponent("missing"), path: empty.path) == nil)
        let message = PostgresServer.skipMessage(.init(description: "no PostgreSQL server binaries (initdb, pg_ctl) were found"))
        #expect(message.hasPrefix("PostgreSQL suites skipped: no PostgreSQL server binaries"))
        #expect(message.contains("apt-get install postgresql libpq-dev"))
        #expect(message.contains("CONTEXTSTACK_POSTGRES_URL"))
        #expect(!message.contains("\n"), "one line")
    }

    @Test func theNewestInstalledVersionWinsAndPATHIsTheFallback() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("cs-fakepg-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        func fakeBinaries(_ folder: URL) throws {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            for name in ["initdb", "pg_ctl"] {
                let file = folder.appendingPathComponent(name)
                _ = FileManager.default.createFile(atPath: file.path, contents: Data("#!/bin/sh\n".utf8), attributes: [.posixPermissions: 0o755])
            }
        }
        let installed = root.appendingPathComponent("lib")
        try fakeBinaries(installed.appendingPathComponent("9/bin"))
        try fakeBinaries(installed.appendingPathComponent("15/bin"))
        let onPath = root.appendingPathComponent("path")
        try fakeBinaries(onPath)
        #expect(PostgresServer.findBinaries(installed: installed, path: onPath.path)?.path == installed.appendingPathComponent("15/bin").path)
        #expect(PostgresServer.findBinaries(installed: root.appendingPathComponent("none"), path: "/nonexistent:" + onPath.path)?.path == onPath.path)
    }
}

@Suite(.enabled(if: PostgresServer.isAvailable, "needs a PostgreSQL server: see PostgresServer"))
struct PostgresConnectionTests {
    let database: TestDatabase
    let connection: PostgresConnection

    init() throws {
        database = try TestDatabase()
        connection = try PostgresConnection(PostgresSettings(url: database.url))
    }

    /// Values a store keeps, edge cases included, sent as parameters and read back.
    static let values: [Value] = [
        .null, .integer(0), .integer(-1), .integer(Int64.max), .integer(Int64.min),
        .double(0.1), .double(-0.0), .double(1e-300), .double(.leastNonzeroMagnitude), .double(.greatestFiniteMagnitude),
        .double(.infinity), .double(-.infinity),
        .text(""), .text("Monk"), .text("it's \"quoted\" ? $1 \\ back"), .text("Zoë 👩‍👩‍👧 ſ ß İ"),
        .blob(Data()), .blob(Data((0...255).map { UInt8($0) })), .blob(Data([0, 0, 92, 120])),
    ]

    @Test func everyValueRoundTripsThroughParameters() throws {
        for value in Self.values {
            var read: [Value] = []
            try connection.query("SELECT ?", [value]) { row in read.append(row.value(0)) }
            #expect(read.count == 1)
            #expect(read.first.map { $0.isIdentical(to: value) } == true, "sent \(value), read \(read.first ?? .null)")
        }
    }

    @Test func everyValueRoundTripsThroughATable() throws {
        try connection.execute("CREATE TABLE t (i bigint, d double precision, s text, b bytea)")
        for value in Self.values {
            let slot = switch value {
            case .integer: "i"
            case .double: "d"
            case .text: "s"
            case .blob, .null: "b"
            }
            try connection.run("DELETE FROM t")
            #expect(try connection.run("INSERT INTO t (\(slot)) VALUES (?)", [value]) == 1)
            var read: [Value] = []
            try connection.query("SELECT \(slot) FROM t") { row in read.append(row.value(0)) }
            #expect(read.first.map { $0.isIdentical(to: value) } == true, "stored \(value) as \(slot), read \(read.first ?? .null)")
        }
    }

    @Test func textWithANulIsRefusedRatherThanCutShort() throws {
        try connection.execute("CREATE TABLE t (s text)")
        let error = try #require(throws: PostgresError.self) {
            try connection.run("INSERT INTO t VALUES (?)", [.text("a\u{0}b")])
        }
        #expect(error.code == .characterNotInRepertoire)
        #expect(error.message.contains("U+0000"))
        #expect(error.sql == "INSERT INTO t VALUES (?)")
        var count = Value.null
        try connection.query("SELECT count(*) FROM t") { count = $0.value(0) }
        #expect(count == .integer(0), "nothing was stored, not even the part before the NUL")
        // As bytes it is fine.
        try connection.run("INSERT INTO t VALUES (convert_from(?, 'UTF8'))", [.blob(Data("ab".utf8))])
    }

    @Test func columnTypesReadAsTheValuesSQLiteWouldHold() throws {
        var row: [Value] = []
        try connection.query("SELECT 7::int2, 8::int4, true, false, 1.5::real, 2.25::numeric, avg(x), sum(x), count(*), 'x'::varchar, NULL::int8 FROM (VALUES (1::int8), (2::int8)) AS v(x)") { result in
            row = (0..<result.columnCount).map { result.value($0) }
        }
        let expected: [Value] = [.integer(7), .integer(8), .integer(1), .integer(0), .double(1.5), .double(2.25),
                                 .double(1.5), .double(3), .integer(2), .text("x"), .null]
        #expect(row.count == expected.count)
        for (read, wanted) in zip(row, expected) {
            #expect(read.isIdentical(to: wanted), "read \(read), expected \(wanted)")
        }
    }

    @Test func aStatementIsPreparedPerArgumentTypes() throws {
        try connection.execute("CREATE TABLE t (i bigint)")
        try connection.run("INSERT INTO t VALUES (1), (NULL)")
        // The same text with a NULL, then an integer, then a double: each its own preparation,
        // so the first one's inferred type does not reject the later ones.
        for argument: Value in [.null, .integer(1), .double(1.0)] {
            var count = Value.null
            try connection.query("SELECT count(*) FROM t WHERE i IS NOT DISTINCT FROM ?", [argument]) { count = $0.value(0) }
            #expect(count == .integer(1), "with \(argument)")
        }
    }

    @Test func theStatementCacheStartsOverPastItsLimit() throws {
        for index in 0..<(PostgresConnection.statementCacheLimit + 3) {
            var read = Value.null
            try connection.query("SELECT ? + \(index)", [.integer(1)]) { read = $0.value(0) }
            #expect(read == .integer(Int64(1 + index)))
        }
        var prepared = Value.null
        try connection.query("SELECT count(*) FROM pg_prepared_statements") { prepared = $0.value(0) }
        #expect((prepared.int64Value ?? .max) <= Int64(PostgresConnection.statementCacheLimit))
    }

    /// A statement among the last used when the cache starts over (`DEALLOCATE ALL`) is
    /// prepared again, not run under the name the server just forgot: the connection's list
    /// of recent statements starts over with the cache.
    @Test func aRecentStatementIsPreparedAgainAfterTheCacheStartsOver() throws {
        func select(_ sql: String) throws -> Value {
            var read = Value.null
            try connection.query(sql, [.integer(1)]) { read = $0.value(0) }
            return read
        }
        // The statements counted below fill the cache; "SELECT ? + 0" is recent when the next
        // one starts it over.
        for index in 1..<PostgresConnection.statementCacheLimit { _ = try select("SELECT ? + \(index)") }
        #expect(try select("SELECT ? + 0") == .integer(1))
        #expect(try select("SELECT ? - 1") == .integer(0))
        #expect(try select("SELECT ? + 0") == .integer(1), "run under the name the server forgot")
    }

    @Test func severalStatementsRunInOneExecute() throws {
        try connection.execute("CREATE TABLE a (x int); CREATE TABLE b (y int); INSERT INTO a VALUES (1)")
        var count = Value.null
        try connection.query("SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b)") { count = $0.value(0) }
        #expect(count == .integer(1))
    }

    @Test func aUniqueViolationNamesItsCodeAndConstraintButNotTheValues() throws {
        try connection.execute("CREATE TABLE person (email text CONSTRAINT person_email UNIQUE)")
        try connection.run("INSERT INTO person VALUES (?)", [.text("monk@example.org")])
        let error = try #require(throws: PostgresError.self) {
            try connection.run("INSERT INTO person VALUES (?)", [.text("monk@example.org")])
        }
        #expect(error.code == .uniqueViolation)
        #expect(error.code.errorClass == "23")
        #expect(error.constraint == "person_email")
        #expect(error.detail?.contains("monk@example.org") == true)
        #expect(error.sql == "INSERT INTO person VALUES (?)")
        #expect(!error.description.contains("monk@example.org"), "\(error)")
        #expect(error.description.contains("23505"))
        // The connection is still usable after a failed statement outside a transaction.
        var count = Value.null
        try connection.query("SELECT count(*) FROM person") { count = $0.value(0) }
        #expect(count == .integer(1))
    }

    @Test func aSyntaxErrorIsThrownWithItsSQL() throws {
        let error = try #require(throws: PostgresError.self) { try connection.execute("SELEKT 1") }
        #expect(error.code == .syntaxError)
        #expect(error.sql == "SELEKT 1")
        let prepared = try #require(throws: PostgresError.self) { try connection.run("SELECT * FROM missing WHERE x = ?", [.integer(1)]) }
        #expect(prepared.code == .undefinedTable)
    }

    /// Statements run at most a minute by default; a timeout in the URL's own `options` wins,
    /// other settings there keep the default, and a statement past its limit is cancelled with
    /// `queryCanceled`.
    @Test func statementsHaveATimeLimit() throws {
        #expect(try connection.scalar("SHOW statement_timeout") == .text("1min"))
        let short = try PostgresConnection(PostgresSettings(url: database.url, statementTimeout: 50))
        let error = try #require(throws: PostgresError.self) { try short.execute("SELECT pg_sleep(5)") }
        #expect(error.code == .queryCanceled)
        var parts = URLComponents(url: database.url, resolvingAgainstBaseURL: false)!
        parts.queryItems = [URLQueryItem(name: "options", value: "-c statement_timeout=2s")]
        #expect(try PostgresConnection(PostgresSettings(url: parts.url!)).scalar("SHOW statement_timeout") == .text("2s"))
        parts.queryItems = [URLQueryItem(name: "options", value: "-c search_path=public")]
        let other = try PostgresConnection(PostgresSettings(url: parts.url!))
        #expect(try other.scalar("SHOW statement_timeout") == .text("1min"))
        #expect(try other.scalar("SHOW search_path") == .text("public"))
    }

    /// Texts go both ways as UTF-8 whatever the URL says: a `client_encoding` there would make
    /// the server send bytes the connection reads as UTF-8.
    @Test func theClientEncodingIsUTF8WhateverTheURLSays() throws {
        var parts = URLComponents(url: database.url, resolvingAgainstBaseURL: false)!
        parts.queryItems = [URLQueryItem(name: "client_encoding", value: "LATIN1")]
        let connection = try PostgresConnection(PostgresSettings(url: parts.url!))
        #expect(try connection.scalar("SHOW client_encoding") == .text("UTF8"))
        #expect(try connection.scalar("SELECT ?::text", [.text("Zoë 🐈")]) == .text("Zoë 🐈"))
    }

    /// libpq's environment variables are read for the keywords it is not given: ContextStack
    /// leaves out its default connect timeout and name where `PGCONNECT_TIMEOUT` and
    /// `PGAPPNAME` are set, and puts `PGOPTIONS` after its own server settings and before the
    /// URL's (Docs/Postgres.md, "Connection settings").
    @Test func theEnvironmentsSettingsComeBetweenTheDefaultsAndTheURL() throws {
        var parts = URLComponents(url: database.url, resolvingAgainstBaseURL: false)!
        parts.queryItems = [URLQueryItem(name: "options", value: "-c work_mem=8MB")]
        let settings = PostgresSettings(url: parts.url!)
        let plain = Dictionary(settings.keywordsAndValues(environment: [:]), uniquingKeysWith: { $1 })
        #expect(plain["connect_timeout"] == "10" && plain["application_name"] == "ContextStack")
        #expect(plain["options"] == "-c statement_timeout=60000 -c work_mem=8MB -c extra_float_digits=3 -c bytea_output=hex -c standard_conforming_strings=on")
        let environment = ["PGCONNECT_TIMEOUT": "3", "PGAPPNAME": "orders", "PGOPTIONS": "-c search_path=tenant", "PGCLIENTENCODING": "LATIN1"]
        let set = Dictionary(settings.keywordsAndValues(environment: environment), uniquingKeysWith: { $1 })
        #expect(set["connect_timeout"] == nil && set["application_name"] == nil, "left to libpq, which reads the environment")
        #expect(set["options"] == "-c statement_timeout=60000 -c search_path=tenant -c work_mem=8MB -c extra_float_digits=3 -c bytea_output=hex -c standard_conforming_strings=on")
        #expect(set["client_encoding"] == "UTF8", "given to libpq, so PGCLIENTENCODING, which libpq reads only for what it is not given, does not change it")
    }

    /// Doubles come back exact whatever the server's `extra_float_digits` (a database default
    /// of 0 rounded them to 15 digits as they were read as text): ContextStack sets it last.
    @Test func doublesComeBackExactWhateverTheServersFloatDigits() throws {
        var parts = URLComponents(url: database.url, resolvingAgainstBaseURL: false)!
        parts.queryItems = [URLQueryItem(name: "options", value: "-c extra_float_digits=0")]
        let connection = try PostgresConnection(PostgresSettings(url: parts.url!))
        let value = 0.1 + 0.2
        #expect(try connection.scalar("SELECT ?::float8", [.double(value)]) == .double(value))
        #expect(try connection.scalar("SELECT 0.1::float8 + 0.2::float8") == .double(value))
    }

    /// The same for bytes: with `bytea_output=escape` (a database's or a role's default, kept
    /// for old drivers) they came back as their escaped text, and a commit saved that text.
    @Test func bytesComeBackWhateverTheServersByteaOutput() throws {
        var parts = URLComponents(url: database.url, resolvingAgainstBaseURL: false)!
        parts.queryItems = [URLQueryItem(name: "options", value: "-c bytea_output=escape -c standard_conforming_strings=off")]
        let connection = try PostgresConnection(PostgresSettings(url: parts.url!))
        let bytes = Data([0, 1, 0x5c, 0x27, 0xff, 0x41])
        #expect(try connection.scalar("SELECT ?::bytea", [.blob(bytes)]) == .blob(bytes))
        #expect(try connection.scalar("SELECT '\\x00ff'::bytea") == .blob(Data([0, 0xff])))
    }

    /// Docs/Postgres.md, "Faults": a connection whose server stops answering without closing
    /// it (a dropped network, a machine gone) is found broken in about 30 seconds, not the
    /// kernel's fifteen minutes. The kernel does the finding; what ContextStack does is give
    /// the socket TCP keepalives (after 15 s, every 5 s, 3 unanswered) and a user timeout of
    /// 30 s, as read back from the socket here. A URL's own `keepalives_idle` wins.
    #if os(Linux)
    @Test func theSocketHasKeepalivesAndAUserTimeout() throws {
        var address = sockaddr_storage()
        var size = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let family = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(connection.socket, $0, &size) == 0 ? Int32($0.pointee.sa_family) : -1 }
        }
        // A server reached through a Unix socket (CONTEXTSTACK_POSTGRES_URL) has no TCP to tune.
        guard family == AF_INET || family == AF_INET6 else { return }
        func option(_ socket: Int32, _ level: Int32, _ name: Int32) -> Int32 {
            var value: Int32 = -1
            var length = socklen_t(MemoryLayout<Int32>.size)
            return getsockopt(socket, level, name, &value, &length) == 0 ? value : -1
        }
        let tcp = Int32(IPPROTO_TCP)
        let socket = connection.socket
        #expect(option(socket, SOL_SOCKET, SO_KEEPALIVE) == 1)
        #expect(option(socket, tcp, TCP_KEEPIDLE) == 15 && option(socket, tcp, TCP_KEEPINTVL) == 5 && option(socket, tcp, TCP_KEEPCNT) == 3)
        #expect(option(socket, tcp, TCP_USER_TIMEOUT) == 30_000)

        var parts = URLComponents(url: database.url, resolvingAgainstBaseURL: false)!
        // Each of the URL parameters Docs/Postgres.md names replaces its default.
        parts.queryItems = (parts.queryItems ?? []) + [("keepalives_idle", "60"), ("keepalives_interval", "2"), ("keepalives_count", "7"), ("tcp_user_timeout", "5000")]
            .map { URLQueryItem(name: $0.0, value: $0.1) }
        let tuned = try PostgresConnection(PostgresSettings(url: parts.url!))
        #expect(option(tuned.socket, tcp, TCP_KEEPIDLE) == 60 && option(tuned.socket, tcp, TCP_KEEPINTVL) == 2 && option(tuned.socket, tcp, TCP_KEEPCNT) == 7)
        #expect(option(tuned.socket, tcp, TCP_USER_TIMEOUT) == 5_000)
    }
    #endif

    /// The client waits for an answer for the session's statement timeout plus a margin
    /// (`hungServerMargin`), whichever setting gave the timeout, and for as long as it takes
    /// when there is none.
    @Test func theClientWaitsForAnAnswerTheStatementTimeoutAndAMargin() throws {
        #expect(connection.answerLimit == 60_000 + 30_000)
        var short = PostgresSettings(url: database.url, statementTimeout: 1_500)
        short.hungServerMargin = 700
        #expect(try PostgresConnection(short).answerLimit == 2_200)
        for (options, limit) in [("-c statement_timeout=2s", 32_000), ("--statement-timeout=250", 30_250), ("-c Statement_Timeout=0", nil)] as [(String, Int?)] {
            let url = database.url.addingServerOption(options)
            #expect(try PostgresConnection(PostgresSettings(url: url)).answerLimit == limit, "\(options)")
        }
    }

    /// Docs/Postgres.md, "Faults": a server process that stops (its machine still answering,
    /// so TCP finds nothing, and stopped, so its statement timeout never fires) is given up
    /// after the statement timeout and the margin: the statement fails as a lost connection,
    /// and the connection counts as broken, for its owner to replace. Whether it waited for a
    /// simple query, a prepared statement, a pipeline's `COMMIT` or, at connect, the session's
    /// statement timeout. The process is stopped with `SIGSTOP`, so only on a server of our own.
    @Test func aServerProcessThatStopsIsGivenUpAfterTheTimeoutAndTheMargin() throws {
        guard try PostgresServer.shared.get().folder != nil else { return }
        var settings = PostgresSettings(url: database.url, statementTimeout: 200)
        settings.hungServerMargin = 300
        let waits: [(String, (PostgresConnection) throws -> Void)] = [
            ("a simple query", { try $0.execute("SELECT 1") }),
            ("a prepared statement", { try $0.run("SELECT ?::int8", [.integer(1)]) }),
            ("a pipeline", { connection in
                connection.beginLater("BEGIN")
                try connection.enqueue("SELECT ?::int8", [.integer(1)])
                try connection.commit()
            }),
        ]
        for (name, wait) in waits {
            let stopped = try PostgresConnection(settings)
            #expect(stopped.answerLimit == 500)
            stopped.answerLimit = nil    // however long the first prepares take on a busy machine
            try wait(stopped)    // prepared and answered while the process runs
            stopped.answerLimit = 500
            let process = stopped.backendPID
            #expect(kill(process, SIGSTOP) == 0)
            defer { kill(process, SIGCONT) }
            // A client that waited on would hang the test: let the process go on after a while,
            // so that its answer comes and the expectation below fails instead.
            DispatchQueue.global().asyncAfter(deadline: .now() + 10) { kill(process, SIGCONT) }
            let error = try #require(throws: PostgresError.self, "\(name)") { try wait(stopped) }
            #expect(error.code == .connectionLost && error.code.isConnectionFailure, "\(name): \(error)")
            #expect(error.message.contains("within 500 ms") && error.message.contains("taken as hung"), "\(name): \(error)")
            #expect(stopped.isBroken, "\(name)")
        }
        // The read of the session's statement timeout, at connect when the URL or `PGOPTIONS`
        // may set one, is bounded too: by the margin alone, the session's limit being unknown.
        let connected = try PostgresConnection(settings)
        let process = connected.backendPID
        #expect(kill(process, SIGSTOP) == 0)
        defer { kill(process, SIGCONT) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 10) { kill(process, SIGCONT) }
        let error = try #require(throws: PostgresError.self) { try connected.readStatementTimeout() }
        #expect(error.code == .connectionLost && error.message.contains("within 300 ms: the server process is taken as hung"), "\(error)")
        #expect(connected.isBroken)
    }

    /// A statement cache that starts over (`DEALLOCATE ALL`) while a transaction waits to begin
    /// leaves that transaction as asked: its `BEGIN` and preamble go out together, and every
    /// statement of the pipeline, `COMMIT` among them, is still prepared. Whichever statement
    /// of the pipeline fills the cache (the fills step across the edge).
    @Test func aStatementCacheStartingOverKeepsTheTransactionWaitingToBegin() throws {
        let limit = PostgresConnection.statementCacheLimit
        for fill in (limit - 6)...limit {
            let connection = try PostgresConnection(PostgresSettings(url: database.url))
            for index in 0..<fill { _ = try connection.run("SELECT \(index)::int8 + ?::int8", [.integer(0)]) }
            connection.beginLater("BEGIN ISOLATION LEVEL READ COMMITTED")
            connection.transactionPreamble = ["SET LOCAL lock_timeout = '50ms'"]
            try connection.enqueue("SELECT ?::int8", [.integer(1)])
            #expect(try connection.scalar("SELECT current_setting('lock_timeout')") == .text("50ms"), "after \(fill) statements")
            try connection.commit()
            #expect(!connection.isInTransaction)
        }
    }

    /// A statement sent without waiting is answered before the connection's next use, and its
    /// error is thrown there.
    @Test func aStatementSentWithoutWaitingIsSettledByTheNextUse() throws {
        try connection.execute("BEGIN")
        try connection.send("COMMIT")
        #expect(try connection.scalar("SELECT 1") == .integer(1))
        #expect(!connection.isInTransaction)
        try connection.send("SELECT * FROM \"NoSuchTable\"")
        let error = try #require(throws: PostgresError.self) { try connection.execute("SELECT 1") }
        #expect(error.code == .undefinedTable)
        #expect(try connection.scalar("SELECT 2") == .integer(2), "the connection goes on")
    }

    @Test func transactionsAreTracked() throws {
        #expect(!connection.isInTransaction)
        try connection.execute("BEGIN")
        #expect(connection.isInTransaction)
        #expect(throws: PostgresError.self) { try connection.execute("SELECT 1/0") }
        #expect(connection.isInTransaction, "a failed transaction is still open until ROLLBACK")
        try connection.execute("ROLLBACK")
        #expect(!connection.isInTransaction)
    }

    /// A `BEGIN` left for later goes out with the next statement — prepared (in a pipeline) or
    /// not — and opens the transaction that statement runs in; nothing is sent before.
    @Test func aLaterBeginOpensTheTransactionOfTheNextStatement() throws {
        try connection.execute("CREATE TABLE t (v int8)")
        let other = try PostgresConnection(PostgresSettings(url: database.url))
        for prepared in [true, false] {
            let before = try other.scalar("SELECT count(*) FROM t")
            connection.beginLater("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            #expect(connection.isInTransaction)
            #expect(PQtransactionStatus(connection.handle) == PQTRANS_IDLE, "nothing sent yet")
            if prepared {
                #expect(try connection.scalar("SELECT ?", [.integer(1)]) == .integer(1))
            } else {
                try connection.execute("SELECT 1")
            }
            #expect(PQtransactionStatus(connection.handle) == PQTRANS_INTRANS)
            try other.execute("INSERT INTO t VALUES (1)")
            // The snapshot the first statement took holds for the next: one transaction.
            #expect(try connection.scalar("SELECT count(*) FROM t") == before)
            #expect(throws: PostgresError.self) { try connection.execute("INSERT INTO t VALUES (2)") }
            try connection.execute("ROLLBACK")
            #expect(!connection.isInTransaction)
            #expect(try connection.scalar("SELECT count(*) FROM t") != before, "a new statement, a new snapshot")
        }
    }

    /// The statement that carries a later `BEGIN` fails as it would alone, leaving the
    /// transaction open and failed; a `BEGIN` that fails is thrown as such.
    @Test func aStatementCarryingALaterBeginFailsInsideTheTransaction() throws {
        connection.beginLater("BEGIN")
        let error = try #require(throws: PostgresError.self) { try connection.run("SELECT 1 / ?", [.integer(0)]) }
        #expect(error.code == PostgresError.Code(rawValue: "22012"), "division by zero")
        #expect(connection.isInTransaction && PQtransactionStatus(connection.handle) == PQTRANS_INERROR)
        try connection.execute("ROLLBACK")
        connection.beginLater("BEGIN ISOLATION LEVEL NO SUCH LEVEL")
        let refused = try #require(throws: PostgresError.self) { try connection.run("SELECT ?", [.integer(1)]) }
        #expect(refused.code == .syntaxError)
        #expect(!connection.isInTransaction && !connection.isBroken)
        #expect(try connection.scalar("SELECT ?", [.integer(3)]) == .integer(3), "out of the pipeline, the connection goes on")
        connection.beginLater("BEGIN")
        #expect(connection.abandonPendingBegin())
        #expect(!connection.isInTransaction && !connection.abandonPendingBegin())
    }

    /// Queued statements go out together and commit with `COMMIT`; the connection's next use
    /// reads their answers first, so it sees what they did. More than a pipeline's depth, and
    /// statements prepared while others are queued, work the same.
    @Test func queuedStatementsCommitTogether() throws {
        try connection.execute("CREATE TABLE t (v int8 PRIMARY KEY, s text)")
        connection.beginLater("BEGIN")
        let count = PostgresConnection.pipelineDepth * 2 + 3
        for value in 0..<count { try connection.enqueue("INSERT INTO t (v) VALUES (?)", [.integer(Int64(value))]) }
        try connection.enqueue("UPDATE t SET s = ? WHERE v = ?", [.text("one"), .integer(1)])
        #expect(try connection.scalar("SELECT count(*) FROM t") == .integer(Int64(count)), "a query reads the queue's answers first")
        try connection.enqueue("DELETE FROM t WHERE v = ?", [.integer(0)])
        try connection.commit()
        #expect(!connection.isInTransaction)
        #expect(try connection.scalar("SELECT count(*) FROM pg_prepared_statements WHERE statement IN ('BEGIN', 'COMMIT')") == .integer(2),
                "BEGIN and COMMIT go out prepared, not parsed again at every transaction")
        let other = try PostgresConnection(PostgresSettings(url: database.url))
        #expect(try other.scalar("SELECT count(*) FROM t") == .integer(Int64(count - 1)))
        #expect(try other.scalar("SELECT s FROM t WHERE v = 1") == .text("one"))
    }

    /// A queued statement that fails is thrown, with its own SQL, by `commit()`; the statements
    /// after it and `COMMIT` did not run, and the transaction is left to roll back whole.
    @Test func aFailingQueuedStatementFailsTheCommitWhole() throws {
        try connection.execute("CREATE TABLE t (v int8 PRIMARY KEY)")
        connection.beginLater("BEGIN")
        try connection.enqueue("INSERT INTO t (v) VALUES (?), (?)", [.integer(2), .integer(3)])
        try connection.enqueue("INSERT INTO t (v) VALUES (?)", [.integer(1)])
        try connection.enqueue("INSERT INTO t (v) VALUES (?)", [.integer(1)])
        try connection.enqueue("INSERT INTO t (v) VALUES (?)", [.integer(4)])
        let error = try #require(throws: PostgresError.self) { try connection.commit() }
        #expect(error.code == .uniqueViolation)
        #expect(error.sql == "INSERT INTO t (v) VALUES (?)")
        #expect(PQtransactionStatus(connection.handle) == PQTRANS_INERROR, "not committed")
        try connection.execute("ROLLBACK")
        #expect(try connection.scalar("SELECT count(*) FROM t") == .integer(0))
    }

    /// A `ROLLBACK` undoes what queued statements did, and so does not throw their error: it
    /// reads their answers and rolls back (as when a commit is cut short by an error of its own
    /// after a queued statement failed).
    @Test func aRollbackForgetsTheErrorsOfWhatItUndoes() throws {
        try connection.execute("CREATE TABLE t (v int8 PRIMARY KEY)")
        connection.beginLater("BEGIN")
        try connection.enqueue("INSERT INTO t (v) VALUES (?)", [.integer(1)])
        try connection.execute("SAVEPOINT s")
        try connection.enqueue("INSERT INTO t (v) VALUES (?)", [.integer(1)])
        try connection.execute("ROLLBACK TO SAVEPOINT s")
        try connection.enqueue("INSERT INTO t (v) VALUES (?)", [.integer(2)])
        try connection.commit()
        #expect(try connection.scalar("SELECT count(*) FROM t") == .integer(2), "the first and the third")
        connection.beginLater("BEGIN")
        try connection.enqueue("INSERT INTO t (v) VALUES (?)", [.integer(2)])
        try connection.execute("ROLLBACK")
        #expect(!connection.isInTransaction)
        #expect(try connection.scalar("SELECT count(*) FROM t") == .integer(2))
    }

    /// A transaction's preamble follows its `BEGIN` into the pipeline, and holds for that
    /// transaction only.
    @Test func aPreambleHoldsForItsTransactionOnly() throws {
        connection.transactionPreamble = ["SET LOCAL lock_timeout = '1234ms'"]
        connection.beginLater("BEGIN")
        #expect(try connection.scalar("SELECT current_setting('lock_timeout')") == .text("1234ms"))
        try connection.commit()
        #expect(try connection.scalar("SELECT current_setting('lock_timeout')") == .text("0"))
    }

    /// `isAlive` notices a connection the server closed, without sending anything.
    @Test func aConnectionTheServerClosedIsNoticedBeforeUse() throws {
        #expect(connection.isAlive())
        let admin = try PostgresConnection(PostgresSettings(url: database.url))
        try admin.run("SELECT pg_terminate_backend(?::int4)", [.integer(Int64(connection.backendPID))])
        var alive = true
        for _ in 0..<200 where alive {
            alive = connection.isAlive()
            if alive { usleep(10_000) }
        }
        #expect(!alive && connection.isBroken)
    }

    @Test func aConnectionTheServerEndsIsReportedAsLost() throws {
        let admin = try PostgresConnection(PostgresSettings(url: database.url))
        try admin.run("SELECT pg_terminate_backend(?::int4)", [.integer(Int64(connection.backendPID))])
        let error = try #require(throws: PostgresError.self) {
            try connection.query("SELECT ?", [.integer(1)]) { _ in }
        }
        #expect(error.code.isConnectionFailure, "\(error)")
        #expect(connection.isBroken)
        #expect(throws: PostgresError.self) { try connection.execute("SELECT 1") }
    }

    /// The codes of a session that is gone, whatever its cause: class 08, and the server's
    /// own ending of it (`57P01` to `57P05`, and `25P03` for an idle transaction), which is what a fast shutdown or a failover sends
    /// a connection's next statement (the writer's `BEGIN` met it, before its connection was
    /// read to the end: `PostgresStoreTests.sessionsTheServerEndsAreReplacedWithoutAnError`).
    /// A cancelled statement, a deadlock or a constraint leave the session usable.
    @Test func codesOfASessionThatIsGoneAreConnectionFailures() {
        for code in ["08000", "08001", "08006", "57P01", "57P02", "57P03", "57P04", "57P05", "25P03"] {
            #expect(PostgresError.Code(rawValue: code).isConnectionFailure, "\(code)")
        }
        for code in ["57014", "40P01", "40001", "23505", "55P03", "XX000"] {
            #expect(!PostgresError.Code(rawValue: code).isConnectionFailure, "\(code)")
        }
    }

    @Test func aFailedConnectionNamesTheServerWithoutThePassword() throws {
        // A port nothing listens on: the database's own port with the server asked to refuse…
        // simplest is a port just freed.
        let url = URL(string: "postgres://app:hunter2@127.0.0.1:1/app")!
        let error = try #require(throws: PostgresError.self) {
            _ = try PostgresConnection(PostgresSettings(url: url, connectTimeout: 2))
        }
        #expect(error.code == .cannotConnect)
        #expect(error.code.isConnectionFailure)
        #expect(error.description.contains("postgres://app@127.0.0.1:1/app"), "\(error)")
        #expect(!error.description.contains("hunter2"), "\(error)")
    }

    @Test func aURLThatIsNotPostgresIsRefusedByName() throws {
        let error = try #require(throws: PostgresError.self) {
            _ = try PostgresConnection(PostgresSettings(url: URL(string: "mysql://app:hunter2@db/app")!))
        }
        #expect(error.description.contains("not a PostgreSQL URL"))
        #expect(!error.description.contains("hunter2"))
    }

    @Test func settingsInTheURLWinOverTheDefaults() throws {
        var parts = URLComponents(url: database.url, resolvingAgainstBaseURL: false)!
        parts.queryItems = [URLQueryItem(name: "application_name", value: "from-the-url")]
        let named = try PostgresConnection(PostgresSettings(url: parts.url!, applicationName: "default"))
        var name = Value.null
        try named.query("SELECT current_setting('application_name')") { name = $0.value(0) }
        #expect(name == .text("from-the-url"))
        var fallback = Value.null
        try connection.query("SELECT current_setting('application_name')") { fallback = $0.value(0) }
        #expect(fallback == .text("ContextStack"))
    }

    @Test func textComesBackAsUTF8WhateverTheServerDefault() throws {
        var encoding = Value.null
        try connection.query("SELECT current_setting('client_encoding')") { encoding = $0.value(0) }
        #expect(encoding == .text("UTF8"))
    }
}

/// How rows' text is parsed (`PostgresRow`): integers and doubles are read where libpq keeps
/// them, without `String`, and must read exactly what the C library reads from the same text.
@Suite struct PostgresValueParsingTests {
    private static func parsed<T>(_ text: String, _ parse: (UnsafeRawPointer, Int) -> T) -> T {
        var bytes = Array(text.utf8)
        bytes.append(0) // libpq keeps every value NUL-terminated
        return bytes.withUnsafeBytes { parse($0.baseAddress!, text.utf8.count) }
    }

    private static func integer(_ text: String) -> Int64? {
        parsed(text) { PostgresRow.integer(UnsafeRawBufferPointer(start: $0, count: $1)) }
    }

    @Test func integersAreInt8OutsDigitsAndNothingElse() {
        for value: Int64 in [0, 1, -1, 9, 10, 99, 1_000_000_007, -1_000_000_007, .max, .min, .max - 1, .min + 1] {
            #expect(Self.integer(String(value)) == value)
        }
        #expect(Self.integer("9223372036854775808") == nil, "one past Int64.max")
        #expect(Self.integer("-9223372036854775809") == nil, "one past Int64.min")
        #expect(Self.integer("18446744073709551616") == nil, "past UInt64 as well")
        #expect(Self.integer("99999999999999999999") == nil, "20 digits")
        #expect(Self.integer("00000000000000000000042") == 42, "leading zeros past 19 digits")
        for text in ["", "-", "+1", " 1", "1 ", "1.5", "1e3", "0x10", "--1", "1-"] {
            #expect(Self.integer(text) == nil, "\(text)")
        }
    }

    @Test func doublesReadExactlyWhatStrtodReads() {
        var texts = ["0", "-0", "0.5", "-12.375", "0.1", "0.000123", "123456789012345678", "1234567890123456789",
                     "12345678901234567890", "18446744073709551617", "-18446744073709551617", "9007199254740993", "9007199254740992", "0.30000000000000004",
                     "4.35", "1e+100", "1.5e-07", "NaN", "Infinity", "-Infinity", "1.", ".5", "-.5", "12.34.5",
                     "", "-", ".", "1e", "0.99999999999999999999", "100000000000000000000", "33333.333333333336",
                     "5e-324", "1.7976931348623157e+308", "2.2250738585072014e-308"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let double = Double(bitPattern: generator.next() & ~(0x7FF << 52) | (UInt64.random(in: 1000...1100) << 52))
            texts.append(double.description)
            texts.append(String(Int.random(in: -1_000_000...1_000_000)) + "." + String(Int.random(in: 0...99_999)))
            texts.append(String(format: "%.*f", Int.random(in: 0...18), Double.random(in: -1e6...1e6)))
        }
        for text in texts {
            let expected: Double? = Self.parsed(text) { start, count in
                var end: UnsafeMutablePointer<CChar>?
                let double = strtod(start.assumingMemoryBound(to: CChar.self), &end)
                return count > 0 && UnsafeRawPointer(end!) == start + count ? double : nil
            }
            let read = Self.parsed(text) { PostgresRow.double($0, count: $1) }
            if let expected {
                #expect(read.bitPattern == expected.bitPattern || (read.isNaN && expected.isNaN), "\(text): read \(read), strtod \(expected)")
            } else {
                #expect(read.isNaN, "\(text) is not a double: read \(read)")
            }
            if let short = Self.parsed(text, { PostgresRow.shortDecimal(UnsafeRawBufferPointer(start: $0, count: $1)) }) {
                #expect(short.bitPattern == expected?.bitPattern, "\(text): the short path read \(short), strtod \(String(describing: expected))")
            }
        }
    }
}

