@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// Several processes, and several stacks in one process, on one store file: what
/// `Docs/Stores.md` ("Several processes") says is safe, tested with real processes.
///
/// The writers are `stress-writer` children (Tests/StressWriter); their model is `CrashEntry`
/// and `CrashTally` here.
@Suite struct SeveralProcessesTests {
    /// Every row of `writer` in the file, as (batch, count of its rows).
    static func batches(of writer: Int, in db: Connection) throws -> [Int: Int] {
        let rows = try db.rows("SELECT batch, count(*) FROM Entry WHERE writer = ? GROUP BY batch", [.integer(Int64(writer))])
        return Dictionary(uniqueKeysWithValues: rows.map { (Int($0[0].int64Value!), Int($0[1].int64Value!)) })
    }

    /// A process holds two stacks on one file; another process opens the file, reads and
    /// closes it; then the first commits more. Every commit it acknowledged is in the file
    /// after it is killed, and its write-ahead log was never taken from under it.
    ///
    /// Closing any descriptor on a database file drops every POSIX lock the process holds on
    /// it. Reading the header with a descriptor of its own when the second stack opened used
    /// to drop the first stack's locks, so the other process believed it was the file's last
    /// user, checkpointed and deleted the write-ahead log, and the next commits went into a
    /// deleted file.
    @Test func anotherProcessClosingTheFileLosesNoAcknowledgedCommit() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("shared.sqlite")
        let writer = try StressWriterProcess(["two-stacks", url.path])
        try writer.waitFor("ready")

        // Another ContextStack process (this one) opens the file, reads, and closes it.
        do {
            let stack = try Stack(model: Model(CrashEntry.self, CrashTally.self), rootContext: .none)
            try stack.addDatabaseStore(at: url)
            let context = try Context(stack: stack, updateTarget: .persistentStore)
            #expect(try context.beginUpdateAndWait { try $0.fetchCount(CrashEntry.self) } == 20)
        }
        #expect(FileManager.default.fileExists(atPath: url.path + "-wal"), "the write-ahead log was deleted while the writer holds the file")

        writer.send("go")
        try writer.waitFor("done")
        #expect(FileManager.default.fileExists(atPath: url.path + "-wal"), "the write-ahead log was deleted while the writer holds the file")
        // What another process sees before the writer dies…
        do {
            let db = try Connection(path: url.path, readOnly: true)
            #expect(try db.scalar("SELECT count(*) FROM Entry WHERE writer = 1") == .integer(110))
        }
        _ = writer.killAndCollect()
        #expect(writer.wasKilled)

        // … and what the file holds after.
        let db = try Connection(path: url.path)
        #expect(try db.scalar("PRAGMA integrity_check") == .text("ok"))
        #expect(try Self.batches(of: 1, in: db) == Dictionary(uniqueKeysWithValues: (0...10).map { ($0, 10) }))
        #expect(try Self.batches(of: 2, in: db) == [0: 10])
    }

    /// Several processes create one new store at the same moment: each waits for the others
    /// (up to the busy timeout) instead of failing, and all their rows are there.
    @Test func processesCreatingOneStoreAtOnceAllSucceed() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        for round in 0..<12 {
            let url = directory.appendingPathComponent("new-\(round).sqlite")
            let children = try (0..<3).map { _ in try StressWriterProcess(["create", url.path]) }
            for child in children { try child.waitFor("ready") }
            for child in children { child.send("go") }
            for child in children {
                child.process.waitUntilExit()
                #expect(child.exitedCleanly, "round \(round): \(child.errorText)")
            }
            let db = try Connection(path: url.path)
            #expect(try db.scalar("SELECT count(*) FROM Entry") == .integer(30))
            #expect(try db.scalar("SELECT count(DISTINCT writer) FROM Entry") == .integer(3))
        }
    }

    /// Two writer processes, each with two stacks on the file, are killed at random moments
    /// while a third process opens, reads and closes the file in a loop. After every round the
    /// file passes `integrity_check`, every batch is whole, and every batch either writer
    /// acknowledged is there.
    @Test func writersKilledWhileAnotherProcessOpensAndClosesLoseNothing() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("chaos.sqlite")
        var generator = SystemRandomNumberGenerator()
        var acknowledged: [Int: Set<Int>] = [1: [], 2: []]
        var inFlightKills = 0
        var rounds = 0
        while (inFlightKills < 8 || rounds < 8) && rounds < 40 {
            rounds += 1
            let opener = try StressWriterProcess(["open-close", url.path])
            let writers = try [1, 2].map { try StressWriterProcess(["chaos", url.path, "\($0)"]) }
            // Both have committed something; the opener has been round at least once.
            var lines: [[String]] = [[], []]
            for (index, writer) in writers.enumerated() {
                while let line = writer.readLine() {
                    lines[index].append(line)
                    if Int(line) != nil { break }
                }
            }
            _ = opener.readLine()
            for (index, writer) in writers.enumerated() {
                usleep(UInt32.random(in: 0...40_000, using: &generator))
                lines[index] += writer.killAndCollect()
                try #require(writer.wasKilled, "writer \(index + 1) stopped by itself: \(writer.errorText)")
            }
            _ = opener.killAndCollect()
            try #require(opener.wasKilled, "the opener stopped by itself: \(opener.errorText)")

            let db = try Connection(path: url.path)
            #expect(try db.scalar("PRAGMA integrity_check") == .text("ok"))
            for (index, writerLines) in lines.enumerated() {
                let writer = index + 1
                let log = WriterLog(writerLines)
                if log.inFlight { inFlightKills += 1 }
                acknowledged[writer, default: []].formUnion(log.acknowledged)
                let present = try Self.batches(of: writer, in: db)
                #expect(present.values.allSatisfy { $0 == batchSize }, "writer \(writer) has partial batches: \(present)")
                let lost = acknowledged[writer, default: []].subtracting(present.keys)
                #expect(lost.isEmpty, "writer \(writer) lost \(lost.count) acknowledged batches, among them \(lost.sorted().prefix(8))")
            }
        }
        #expect(inFlightKills >= 8, "only \(inFlightKills) of \(2 * rounds) kills landed while a commit was in flight")
    }
}
