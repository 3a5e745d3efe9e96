@testable import ContextStack
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

/// The entries the child writes per batch, in one commit.
private let batchSize = 10

/// The `stress-writer` executable, built by SwiftPM beside the test bundle.
func stressWriter() throws -> URL {
    var directories: [URL] = []
    if let executable = Bundle.main.executableURL { directories.append(executable.deletingLastPathComponent()) }
    directories.append(URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent())
    // <package>/Tests/ContextStackTests/this file → <package>/.build/debug
    let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    directories.append(package.appendingPathComponent(".build/debug"))
    for directory in directories {
        let candidate = directory.appendingPathComponent("stress-writer")
        if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
    }
    throw ChildProcessError(message: "stress-writer not found in \(directories.map(\.path)); `swift build` builds it")
}

struct ChildProcessError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

/// A running `stress-writer`, its input, output and errors in pipes.
struct StressWriterProcess {
    let process = Process()
    let input = Pipe()
    let output = Pipe()
    let errors = Pipe()

    init(_ arguments: [String]) throws {
        process.executableURL = try stressWriter()
        process.arguments = arguments
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
    }

    /// What the process wrote to its standard error.
    var errorText: String { String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
}

@Suite struct CrashSafetyTests {
    /// A child commits numbered batches in a loop; it is killed with SIGKILL at a random moment,
    /// again and again. After each kill the store opens, passes `integrity_check`, and holds every
    /// batch wholly or not at all — and every batch the child saw committed.
    @Test func killedWritersLeaveWholeCommits() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("crash.sqlite")
        var generator = SystemRandomNumberGenerator()
        var acknowledged = Set<Int>()
        var kills = 0
        for round in 0..<24 {
            // Every other round through the root writer, whose group commit puts several
            // commits in one transaction.
            let child = try StressWriterProcess(["batches", url.path] + (round.isMultiple(of: 2) ? [] : ["grouped"]))
            var output = Data()
            if round % 4 == 3 {
                // Sometimes early: while the child starts, opens or recovers the store.
                usleep(UInt32.random(in: 0...30_000, using: &generator))
            } else {
                // Usually while it commits: after its first batch, a random while later.
                output = child.output.fileHandleForReading.availableData
                usleep(UInt32.random(in: 0...25_000, using: &generator))
            }
            kill(child.process.processIdentifier, SIGKILL)
            child.process.waitUntilExit()
            output += child.output.fileHandleForReading.readDataToEndOfFile()
            try #require(child.process.terminationReason == .uncaughtSignal, "the writer stopped by itself: \(child.errorText)")
            kills += 1
            acknowledged.formUnion(String(decoding: output, as: UTF8.self).split(separator: "\n").compactMap { Int($0) })

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
        #expect(kills >= 20)
        #expect(!acknowledged.isEmpty)
    }

    /// A child migrating a store is killed at random moments: the file is always wholly the
    /// old version or wholly the new one, never in between, and the last child finishes it.
    @Test func killedMigrationsLeaveOneVersionOrTheOther() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("migrate.sqlite")
        let rows = 20_000
        do {
            let stack = try Stack(model: Model(CrashEntry.self, CrashTally.self), rootContext: .none)
            try stack.addDatabaseStore(at: url)
            try Context(stack: stack).beginUpdateAndWait { update in
                for index in 0..<rows { try update.create(CrashEntry.self).index = index }
                try update.commit()
            }
        }
        let oldHash = try Model(CrashEntry.self, CrashTally.self).versionHash
        let newHash = try Model(CrashEntryV2.self, CrashTally.self).versionHash
        var generator = SystemRandomNumberGenerator()
        for round in 0..<8 {
            let child = try StressWriterProcess(["migrate", url.path])
            if round < 7 {
                // The child starts in some tens of milliseconds and migrates in as many more.
                usleep(UInt32.random(in: 0...80_000, using: &generator))
                kill(child.process.processIdentifier, SIGKILL)
            }
            child.process.waitUntilExit()
            if round == 7 {
                #expect(child.process.terminationReason == .exit && child.process.terminationStatus == 0, "\(child.errorText)")
            }
            let db = try Connection(path: url.path)
            #expect(try db.scalar("PRAGMA integrity_check") == .text("ok"))
            #expect(try db.scalar("SELECT count(*) FROM Entry") == .integer(Int64(rows)))
            let hash = try db.scalar("SELECT value FROM Z_METADATA WHERE key = 'hash'")
            let columns = try db.rows("SELECT name FROM pragma_table_info('Entry')").compactMap { $0[0].stringValue }
            if hash == .text(newHash) {
                #expect(columns.contains("note"))
                #expect(try db.scalar("SELECT count(*) FROM Entry WHERE note = 'migrated'") == .integer(Int64(rows)))
            } else {
                #expect(hash == .text(oldHash))
                #expect(!columns.contains("note"))
            }
            if round == 7 { #expect(hash == .text(newHash)) }
        }
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
        for child in children {
            let ready = String(decoding: child.output.fileHandleForReading.availableData, as: UTF8.self)
            try #require(ready == "ready\n", "writer failed to start: \(child.errorText)")
        }
        for child in children { child.input.fileHandleForWriting.write(Data("go\n".utf8)) }
        for child in children {
            child.process.waitUntilExit()
            #expect(child.process.terminationReason == .exit && child.process.terminationStatus == 0, "writer failed: \(child.errorText)")
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
