@testable import ContextStack
import ContextStackPostgres
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
import Foundation
import Testing

/// The counter the `stress-writer contend` children share (Tests/StressWriter): writer N adds
/// one to `wN` of a random counter in each of its commits.
@Entity(name: "Counter", unique: [["name"]]) final class ContendedCounter: ManagedObject {
    var name: String = ""
    var w0: Int = 0
    var w1: Int = 0
    var w2: Int = 0
    var w3: Int = 0
    /// What every writer adds to: only `.error` may keep every addition here.
    var total: Int = 0
}

/// Four processes committing to one PostgreSQL store at once, each under a merge policy, over
/// the same four objects: what Docs/Postgres.md ("Several processes and machines") promises.
///
/// Each writer adds one to its own property of a random shared counter and to the counter's
/// total, and inserts an entry, 500 times. Policies that keep concurrent changes to different
/// properties (`.objectTrump`, `.storeTrump`) must lose none of the additions to the writers'
/// own properties; `.error` must report every commit that met a change made since it read the
/// counter, so the totals hold exactly the commits that did not throw — a conflict missed
/// between the check and the write (another process committing in between) loses an addition
/// to the total; `.rollback` and `.overwrite` may drop or overwrite additions, by definition,
/// but never an entry. No commit is half saved, no ID is handed out twice, no counter is
/// duplicated.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "PostgreSQL suites need a server"))
struct PostgresSeveralProcessesTests {
    static let writers = 4
    static let commits = 500

    @Test(arguments: ["objectTrump", "storeTrump", "error", "rollback", "overwrite"])
    func fourProcessesContendForTheSameObjects(policy: String) throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        do {
            let stack = try Stack(model: Model(CrashEntry.self, CrashTally.self, ContendedCounter.self), rootContext: .none)
            try stack.addPostgresStore(url: schema.url)
            let setup = try Context(stack: stack, updateTarget: .persistentStore)
            try setup.beginUpdateAndWait { update in
                for index in 0..<4 { try update.create(ContendedCounter.self).name = "c\(index)" }
                try update.commit()
            }
        }
        let children = try (0..<Self.writers).map { writer in
            try StressWriterProcess(["contend", schema.url.absoluteString, String(writer), String(Self.commits), policy])
        }
        for child in children { try child.waitFor("ready") }
        for child in children { child.send("go") }
        var saved: [Int] = []
        var conflicts: [Int] = []
        for child in children {
            let lines = child.remainingLines()
            child.process.waitUntilExit()
            #expect(child.exitedCleanly, "\(child.errorText)")
            let words = try #require(lines.last?.split(separator: " "), "no summary: \(lines)")
            try #require(words.count == 4 && words[0] == "saved" && words[2] == "conflicts", "\(lines)")
            saved.append(Int(words[1])!)
            conflicts.append(Int(words[3])!)
        }

        let db = try PostgresConnection(PostgresSettings(url: schema.url))
        #expect(try db.scalar("SELECT count(*) FROM \"Counter\"") == .integer(4), "no counter is duplicated")
        for writer in 0..<Self.writers {
            #expect(saved[writer] + conflicts[writer] == Self.commits)
            // Every commit that returned is there whole: its entry, once.
            let entries = try db.allRows("SELECT count(*), count(DISTINCT \"index\") FROM \"Entry\" WHERE writer = ?", [.integer(Int64(writer))])
            #expect(entries[0] == [.integer(Int64(saved[writer])), .integer(Int64(saved[writer]))], "writer \(writer)")
            let added = try db.scalar("SELECT sum(w\(writer)) FROM \"Counter\"").int64Value.map(Int.init) ?? 0
            switch policy {
            case "objectTrump", "storeTrump":
                #expect(conflicts[writer] == 0)
                #expect(added == Self.commits, "writer \(writer) under \(policy): an addition to its own property was lost")
            case "error":
                #expect(added == saved[writer], "writer \(writer): a commit that met a concurrent change was saved, or one that saved was lost")
            default:
                #expect(conflicts[writer] == 0)
                #expect(added <= saved[writer])
            }
        }
        if policy == "error" {
            // Four writers over four counters for 500 commits each: they did meet.
            #expect(conflicts.reduce(0, +) > 0, "no conflict at all: the writers did not run at the same time")
            #expect(try db.scalar("SELECT sum(total) FROM \"Counter\"") == .integer(Int64(saved.reduce(0, +))), "a lost update")
        }
        #expect(try db.scalar("SELECT count(DISTINCT \"Z_PK\") = count(*) FROM \"Entry\"") == .integer(1))
    }
}
