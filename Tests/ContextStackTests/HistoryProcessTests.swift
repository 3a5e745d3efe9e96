@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
import ContextStackPostgres
import _ContextStackSQLite
import Foundation
import Testing

/// History with real processes (Docs/History.md): a `stress-writer` child (Tests/StressWriter)
/// commits, this process follows; children killed with SIGKILL never leave data without its
/// history or history without its data. The child's model is `CrashEntry` and `CrashTally`.
@Suite(.timeLimit(.minutes(5))) struct HistoryProcessTests {
    /// What one commit did, by primary key: as the writer printed it, as a remote `Commit`
    /// said it, or as a history transaction recorded it.
    struct Changes: Equatable, CustomStringConvertible {
        var inserted: Set<Int64> = [], updated: Set<Int64> = [], deleted: Set<Int64> = []

        init?(line: String) {
            let parts = line.split(separator: " ")
            guard parts.count == 5, parts[0] == "commit" else { return nil }
            func keys(_ part: Substring) -> Set<Int64> { Set(part.split(separator: "=").dropFirst().first?.split(separator: ",").compactMap { Int64($0) } ?? []) }
            inserted = keys(parts[2])
            updated = keys(parts[3])
            deleted = keys(parts[4])
        }

        init(_ commit: Commit) {
            inserted = Set(commit.inserted.map(\.primaryKey))
            updated = Set(commit.updated.map(\.primaryKey))
            deleted = Set(commit.deleted.map(\.primaryKey))
        }

        init(_ transaction: HistoryTransaction) {
            for change in transaction.changes {
                switch change.kind {
                case .insert: inserted.insert(change.objectID.primaryKey)
                case .update: updated.insert(change.objectID.primaryKey)
                case .delete: deleted.insert(change.objectID.primaryKey)
                }
            }
        }

        var description: String { "ins \(inserted.sorted()) upd \(updated.sorted()) del \(deleted.sorted())" }
    }

    /// This process follows the child's random commits one by one: after each, the main
    /// context's live results equal a fresh fetch, and the remote commit says exactly what the
    /// child did. This process restarts its stack midway. A consumer that reads the history
    /// now and then from its saved token — purging what it read, and restarting — sees every
    /// transaction exactly once.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func anotherProcessesCommitsReachEveryContextAndTokensResume(kind: StoreKind) async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("history.sqlite")
        let schema = kind == .postgres ? try TestSchema() : nil
        func open() throws -> Stack {
            let stack = try Stack(model: Model(CrashEntry.self, CrashTally.self))
            if let schema {
                try stack.addPostgresStore(url: schema.url)
            } else {
                try stack.addDatabaseStore(at: url, tracksHistory: true)
            }
            return stack
        }
        var stack = try open()
        var world = try MainContext(stack: stack)
        var results = try FetchedResults(context: world, CrashEntry.self, orderBy: .ascending("index"))
        var remote = stack.allCommits.filter(\.isRemote).makeAsyncIterator()
        var consumer = try open()
        var saved: HistoryToken?
        var consumed: [HistoryTransaction] = []

        let count = 40
        let child = try StressWriterProcess(["history", schema?.url.absoluteString ?? url.path, "\(count)"])
        try child.waitFor("ready")
        var done: [Changes] = []
        for number in 0..<count {
            child.send("go")
            let line = try #require(child.readLine(), "the writer stopped: \(child.errorText)")
            let changes = try #require(Changes(line: line), "\(line)")
            done.append(changes)
            let commit = try #require(await remote.next())
            #expect(commit.isRemote && commit.author?.hasPrefix("writer-") == true)
            #expect(Changes(commit) == changes, "commit \(number)")
            let fresh = try world.fetchAll(CrashEntry.self, orderBy: .ascending("index"))
            #expect(results.objects.map(\.objectID) == fresh.map(\.objectID), "commit \(number)")
            #expect(results.objects.map(\.batch) == fresh.map(\.batch), "commit \(number)")

            if number == count / 3 {
                // A restart of this process: a new stack follows from the newest transaction.
                stack = try open()
                world = try MainContext(stack: stack)
                results = try FetchedResults(context: world, CrashEntry.self, orderBy: .ascending("index"))
                remote = stack.allCommits.filter(\.isRemote).makeAsyncIterator()
            }
            if number % 7 == 6 {
                if let schema { try await settleHistory(schema.url) }
                let read = try consumer.history(after: saved)
                consumed += read
                saved = read.last?.token ?? saved
            }
            if number == count / 2, let token = saved {
                // The consumer purges what it read, and restarts with its token from a file.
                try consumer.deleteHistory(before: token)
                let file = directory.appendingPathComponent("token.json")
                try JSONEncoder().encode(token).write(to: file)
                consumer = try open()
                saved = try JSONDecoder().decode(HistoryToken.self, from: Data(contentsOf: file))
                #expect(throws: HistoryError.self) { try consumer.history(after: nil) }
            }
        }
        try child.waitFor("done")
        if let schema { try await settleHistory(schema.url) }
        consumed += try consumer.history(after: saved)
        #expect(consumed.map(Changes.init) == done)
        #expect(Set(consumed.map(\.token)).count == count)
    }

    /// A child commits numbered batches with history until killed, again and again, sometimes
    /// through the root writer's group commit. After each kill, the history and the rows say
    /// the same: every transaction inserted one whole batch, and the rows are exactly those.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func killedWritersNeverSeparateDataAndHistory(kind: StoreKind) async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("crash.sqlite")
        let schema = kind == .postgres ? try TestSchema() : nil
        var generator = SystemRandomNumberGenerator()
        var inFlightKills = 0
        var round = 0
        while inFlightKills < 8 && round < 80 {
            let grouped = !round.isMultiple(of: 2)
            let child = try StressWriterProcess(["batches", schema?.url.absoluteString ?? url.path, "history"] + (grouped ? ["grouped"] : []))
            let lines = child.killWhileCommitting(using: &generator)
            try #require(child.wasKilled, "the writer stopped by itself: \(child.errorText)")
            if WriterLog(lines).inFlight { inFlightKills += 1 }
            round += 1

            let stack = try Stack(model: Model(CrashEntry.self, CrashTally.self), rootContext: .none)
            let rows: [[Value]]
            let tally: Value
            if let schema {
                try stack.addPostgresStore(url: schema.url)
                // The killed writer's transaction ends when the server notices; others' too.
                try await settleHistory(schema.url)
                let db = try PostgresConnection(PostgresSettings(url: schema.url))
                rows = try db.allRows("SELECT \"Z_PK\", batch FROM \"Entry\"")
                tally = try db.scalar("SELECT coalesce(sum(entries), 0) FROM \"Tally\"")
            } else {
                try stack.addDatabaseStore(at: url, tracksHistory: true)
                let db = try Connection(path: url.path)
                #expect(try db.scalar("PRAGMA integrity_check") == .text("ok"))
                rows = try db.rows("SELECT Z_PK, batch FROM Entry")
                tally = try db.scalar("SELECT coalesce(sum(entries), 0) FROM Tally")
            }
            var batchOf: [Int64: Int64] = [:]
            for row in rows { batchOf[row[0].int64Value!] = row[1].int64Value! }
            let history = try stack.history(after: nil)
            var inserted = Set<Int64>()
            for transaction in history {
                let entries = transaction.changes.filter { $0.entityName == "Entry" }
                #expect(entries.count == batchSize && entries.allSatisfy { $0.kind == .insert }, "\(transaction)")
                #expect(Set(entries.map { batchOf[$0.objectID.primaryKey] }).count == 1, "a transaction of rows of several batches, or of none")
                #expect(transaction.changes.contains { $0.entityName == "Tally" })
                inserted.formUnion(entries.map(\.objectID.primaryKey))
            }
            #expect(inserted == Set(batchOf.keys), "rows without history, or history without rows")
            #expect(tally.int64Value == Int64(history.count * batchSize))
        }
        #expect(inFlightKills >= 8, "only \(inFlightKills) of \(round) kills landed while a commit was in flight")
    }
}
