@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

@Suite struct SQLiteTests {
    @Test func valuesRoundTripThroughBindAndRead() throws {
        let db = try Connection(path: ":memory:")
        try db.execute("CREATE TABLE t (v)")
        let values: [Value] = [
            .null, .integer(0), .integer(.max), .integer(.min), .double(-1.5), .double(.infinity),
            .text(""), .text("héllo"), .text("a\u{0}b"), .text(String(repeating: "x", count: 100_000)),
            .blob(Data()), .blob(Data([0, 1, 2, 255])),
        ]
        for value in values {
            try db.cachedStatement("INSERT INTO t (v) VALUES (?)").bindAndExecute([value])
        }
        let rows = try db.rows("SELECT v FROM t ORDER BY rowid")
        #expect(rows.count == values.count)
        for (row, value) in zip(rows, values) {
            #expect(row[0] == value)
            #expect(String(describing: row[0]) == String(describing: value))
        }
    }

    @Test func emptyTextAndBlobKeepTheirStorageClass() throws {
        let db = try Connection(path: ":memory:")
        #expect(try db.scalar("SELECT typeof(?)", [.text("")]) == .text("text"))
        #expect(try db.scalar("SELECT typeof(?)", [.blob(Data())]) == .text("blob"))
    }

    @Test func statementsAreCachedPerConnection() throws {
        let db = try Connection(path: ":memory:")
        let first = try db.cachedStatement("SELECT 1")
        let second = try db.cachedStatement("SELECT 1")
        #expect(first === second)
        #expect(try db.cachedStatement("SELECT 2") !== first)
    }

    /// The few statements used last are found before the cache by text; both give the
    /// statement of the same text, built anew or not, and starting the cache over (past its
    /// limit) starts both over.
    @Test func recentStatementsAndTheCacheAgree() throws {
        let db = try Connection(path: ":memory:")
        let texts = (0..<20).map { "SELECT \($0) + 0" }
        let statements = try texts.map { try db.cachedStatement($0) }
        for round in 0..<3 {
            for (index, text) in texts.enumerated().shuffled() {
                let again = try db.cachedStatement(String(decoding: Array(text.utf8), as: UTF8.self))
                #expect(again === statements[index], "round \(round), \(text)")
                #expect(try db.scalar(text) == .integer(Int64(index)))
            }
        }
        for index in 0...Connection.statementCacheLimit { _ = try db.cachedStatement("SELECT \(index) * 2") }
        let fresh = try db.cachedStatement(texts[0])
        #expect(fresh !== statements[0], "the cache started over")
        #expect(try db.scalar(texts[0]) == .integer(0))
    }

    @Test func writeTransactionRollsBackWhenTheBodyThrows() throws {
        struct Boom: Error {}
        let db = try Connection(path: ":memory:")
        try db.execute("CREATE TABLE t (v)")
        #expect(throws: Boom.self) {
            try db.writeTransaction {
                try db.execute("INSERT INTO t VALUES (1)")
                throw Boom()
            }
        }
        #expect(try db.scalar("SELECT count(*) FROM t") == .integer(0))
        #expect(!db.isInTransaction)
        try db.writeTransaction { try db.execute("INSERT INTO t VALUES (1)") }
        #expect(try db.scalar("SELECT count(*) FROM t") == .integer(1))
    }

    @Test func errorsCarryCodeMessageAndSQL() throws {
        let db = try Connection(path: ":memory:")
        try db.execute("CREATE TABLE t (v UNIQUE)")
        try db.execute("INSERT INTO t VALUES (1)")
        do {
            try db.cachedStatement("INSERT INTO t VALUES (?)").bindAndExecute([.integer(1)])
            Issue.record("a duplicate must fail")
        } catch {
            #expect(error.code.primary == .constraint)
            #expect(error.code != .constraint)  // the extended code: SQLITE_CONSTRAINT_UNIQUE
            #expect(error.message.contains("UNIQUE"))
            #expect(error.sql == "INSERT INTO t VALUES (?)")
            #expect(!error.description.contains("1)"))
            switch error as any Error {
            case SQLiteError.Code.constraint: break
            default: Issue.record("~= must match the primary code")
            }
        }
        #expect(throws: SQLiteError.self) { try db.execute("SELEC nonsense") }
    }

    @Test func fileStoresUseWALWithNormalSynchronousAndABusyTimeout() throws {
        let store = try TestStore(.file)
        let db = try store.rawConnection()
        #expect(try db.scalar("PRAGMA journal_mode") == .text("wal"))
        let (synchronous, timeout) = try store.stack.sqliteStore.writer.withLock { state in
            (try state.connection.scalar("PRAGMA synchronous"), try state.connection.scalar("PRAGMA busy_timeout"))
        }
        #expect(synchronous == .integer(1))
        #expect((timeout.int64Value ?? 0) >= 1000)
    }

    @Test func compileOptionsAreReadAtRunTime() throws {
        let db = try Connection(path: ":memory:")
        #expect(!(try db.compileOptions()).isEmpty)
    }

    /// A read takes its snapshot with its own first statement: a read by ID or a query is its
    /// `SELECT` alone, without `BEGIN`, a `SELECT` that pins a snapshot under the store's lock,
    /// or `COMMIT`. So does a main context's public read, which catches up with the commits
    /// handed to it: nothing was written in between (Docs/Performance.md, "What was changed").
    @Test @MainActor func aReadTakesItsSnapshotWithItsFirstStatement() throws {
        let store = try TestStore(.file)
        let (lookup, fetch, acrossKeyPath) = try statementsOfReadsWithNothingToKeepInStep(store)
        #expect(lookup.count == 1 && lookup.first?.hasPrefix("SELECT") == true, "\(lookup)")
        #expect(fetch.count == 1 && fetch.first?.hasPrefix("SELECT") == true, "\(fetch)")
        #expect(acrossKeyPath.first == "BEGIN DEFERRED" && acrossKeyPath.last == "COMMIT" && acrossKeyPath.count == 3, "\(acrossKeyPath)")

        let read = try statementsOfAMainContextRead(store)
        #expect(read.count == 1 && read.first?.hasPrefix("SELECT") == true, "\(read)")
    }


}

