@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

// The model of the `stress-writer` child process (Tests/StressWriter/main.swift), declared
// again here with the same entity names and attributes, so that the hashes match.

@Entity(name: "Entry") final class CrashEntry: ManagedObject {
    var batch: Int = 0
    var index: Int = 0
    var writer: Int = 0
}

@Entity(name: "Tally") final class CrashTally: ManagedObject {
    var entries: Int = 0
}

/// The version of `Entry` that `stress-writer migrate` opens the store with.
@Entity(name: "Entry") final class CrashEntryV2: ManagedObject {
    @Attribute(.indexed) var batch: Int = 0
    var index: Int = 0
    var writer: Int = 0
    var note: String = "migrated"
}

@Suite struct CrashSafetyTests {
    /// A child commits numbered batches in a loop; it is killed with SIGKILL at a random moment,
    /// again and again. After each kill the store opens, passes `integrity_check`, and holds every
    /// batch wholly or not at all — and every batch the child saw committed.
    ///
    /// The kills that count are those that land while a commit is in flight (the child said
    /// "begin N" and not yet "N"): the loop goes on until enough of them did, and says so.
    @Test func killedWritersLeaveWholeCommits() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("crash.sqlite")
        var generator = SystemRandomNumberGenerator()
        var acknowledged = Set<Int>()
        var inFlightKills = 0
        var groupedInFlightKills = 0
        var round = 0
        while (inFlightKills < 12 || groupedInFlightKills < 4) && round < 120 {
            // Every other round through the root writer, whose group commit puts several
            // commits in one transaction.
            let grouped = !round.isMultiple(of: 2)
            let child = try StressWriterProcess(["batches", url.path] + (grouped ? ["grouped"] : []))
            let lines: [String]
            if round % 4 == 3 {
                // Sometimes early: while the child starts, opens or recovers the store.
                usleep(UInt32.random(in: 0...30_000, using: &generator))
                lines = child.killAndCollect()
            } else {
                // Usually while it commits.
                lines = child.killWhileCommitting(using: &generator)
            }
            try #require(child.wasKilled, "the writer stopped by itself: \(child.errorText)")
            let log = WriterLog(lines)
            if log.inFlight && round % 4 != 3 {
                inFlightKills += 1
                if grouped { groupedInFlightKills += 1 }
            }
            acknowledged.formUnion(log.acknowledged)
            round += 1

            // The store opens (recovering the write-ahead log) and reads.
            let stack = try Stack(model: Model(CrashEntry.self, CrashTally.self), rootContext: .none)
            try stack.addDatabaseStore(at: url)
            let context = try Context(stack: stack, updateTarget: .persistentStore)
            let entries = try context.beginUpdateAndWait { try $0.fetchCount(CrashEntry.self) }

            let db = try Connection(path: url.path)
            #expect(try db.scalar("PRAGMA integrity_check") == .text("ok"))
            let batches = try db.rows("SELECT batch, count(*), min(\"index\"), max(\"index\") FROM Entry GROUP BY batch ORDER BY batch")
            for batch in batches {
                #expect(batch[1] == .integer(Int64(batchSize)) && batch[2] == .integer(0) && batch[3] == .integer(Int64(batchSize - 1)),
                        "batch \(batch[0]) is partial: \(batch)")
            }
            let present = Set(batches.compactMap { $0[0].int64Value.map(Int.init) })
            // Batches are numbered on from the last one present, so they are 0..<n without holes.
            #expect(present == Set(0..<present.count))
            #expect(acknowledged.isSubset(of: present), "committed batches lost: \(acknowledged.subtracting(present).sorted())")
            #expect(try db.scalar("SELECT coalesce(sum(entries), 0) FROM Tally") == .integer(Int64(entries)))
            #expect(entries == present.count * batchSize)
        }
        #expect(inFlightKills >= 12, "only \(inFlightKills) of \(round) kills landed while a commit was in flight")
        #expect(groupedInFlightKills >= 4, "only \(groupedInFlightKills) kills landed in flight through the root writer")
        #expect(!acknowledged.isEmpty)
    }

    /// A child migrating a store is killed at random moments: the file is always wholly the
    /// old version or wholly the new one, never in between, and the last child finishes it.
    @Test func killedMigrationsLeaveOneVersionOrTheOther() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("migrate.sqlite")
        let rows = 100_000
        func writeOldStore() throws {
            let stack = try Stack(model: Model(CrashEntry.self, CrashTally.self), rootContext: .none)
            try stack.addDatabaseStore(at: url)
            try Context(stack: stack).beginUpdateAndWait { update in
                for index in 0..<rows { try update.create(CrashEntry.self).index = index }
                try update.commit()
            }
        }
        try writeOldStore()
        let oldHash = try Model(CrashEntry.self, CrashTally.self).versionHash
        let newHash = try Model(CrashEntryV2.self, CrashTally.self).versionHash
        var generator = SystemRandomNumberGenerator()
        // A kill lands inside the migration when the old version is still current but the
        // write-ahead log holds pages (the file was closed cleanly, so the log starts empty
        // each round, and nothing but the migration writes).
        // The window moves with the machine's speed, so the delay before each kill narrows
        // onto it: a kill that came after the migration finished lowers the upper bound, one
        // that came before it wrote anything raises the lower bound.
        var inFlightKills = 0
        var rounds = 0
        var earliest: UInt32 = 0
        var latest: UInt32 = 400_000
        while inFlightKills < 3 && rounds < 40 {
            rounds += 1
            let child = try StressWriterProcess(["migrate", url.path])
            let delay = UInt32.random(in: earliest...max(earliest, latest), using: &generator)
            usleep(delay)
            _ = child.killAndCollect()
            let walSize = (try? FileManager.default.attributesOfItem(atPath: url.path + "-wal")[.size] as? Int) ?? 0
            let version = try checkMigratedStore(url, rows: rows, oldHash: oldHash, newHash: newHash)
            if child.wasKilled && version == oldHash && walSize > 0 { inFlightKills += 1 }
            if version == oldHash && walSize == 0 { earliest = min(delay, latest) }
            if version == newHash { latest = max(delay, earliest) }
            if earliest >= latest { (earliest, latest) = (0, max(latest, 50_000)) }
            if version == newHash {
                // Finished before the kill: start again from the old version.
                // (No connection is open on the file here, so removing it is safe.)
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: url.path + suffix) }
                try writeOldStore()
            }
        }
        #expect(inFlightKills >= 3, "only \(inFlightKills) of \(rounds) kills landed inside the migration")
        // The last child runs to the end and finishes it.
        let child = try StressWriterProcess(["migrate", url.path])
        child.process.waitUntilExit()
        #expect(child.exitedCleanly, "\(child.errorText)")
        #expect(try checkMigratedStore(url, rows: rows, oldHash: oldHash, newHash: newHash) == newHash)
    }

    /// Checks that the store at `url` is wholly the old version or wholly the new one, and
    /// returns the hash of the version it is.
    private func checkMigratedStore(_ url: URL, rows: Int, oldHash: String, newHash: String) throws -> String? {
        let db = try Connection(path: url.path)
        #expect(try db.scalar("PRAGMA integrity_check") == .text("ok"))
        #expect(try db.scalar("SELECT count(*) FROM Entry") == .integer(Int64(rows)))
        let hash = try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'hash'").stringValue
        let columns = try db.rows("SELECT name FROM pragma_table_info('Entry')").compactMap { $0[0].stringValue }
        if hash == newHash {
            #expect(columns.contains("note"))
            #expect(try db.scalar("SELECT count(*) FROM Entry WHERE note = 'migrated'") == .integer(Int64(rows)))
        } else {
            #expect(hash == oldHash)
            #expect(!columns.contains("note"))
        }
        return hash
    }

    /// Two processes commit to one file at the same time: both finish without an error (busy
    /// waits are absorbed by the busy timeout) and every commit of both is there.
    @Test func twoProcessesCommitToOneFile() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("shared.sqlite")
        do {
            let stack = try Stack(model: Model(CrashEntry.self, CrashTally.self))
            try stack.addDatabaseStore(at: url)
        }
        let commits = 400
        let children = try (1...2).map { writer in try StressWriterProcess(["commits", url.path, "\(writer)", "\(commits)"]) }
        // Both have opened the store; then both start at once.
        for child in children { try child.waitFor("ready") }
        for child in children { child.send("go") }
        for child in children {
            child.process.waitUntilExit()
            #expect(child.exitedCleanly, "writer failed: \(child.errorText)")
        }
        let db = try Connection(path: url.path)
        for writer in 1...2 {
            let rows = try db.rows("SELECT count(*), count(DISTINCT \"index\") FROM Entry WHERE writer = ?", [.integer(Int64(writer))])
            #expect(rows == [[.integer(Int64(commits)), .integer(Int64(commits))]])
        }
        #expect(try db.scalar("SELECT count(DISTINCT Z_PK) FROM Entry") == .integer(Int64(2 * commits)))
        #expect(try db.scalar("PRAGMA integrity_check") == .text("ok"))
    }
}
