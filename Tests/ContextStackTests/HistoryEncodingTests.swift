@testable import ContextStack
import ContextStackPostgres
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackPostgres
@testable import _ContextStackPostgresStore
import Foundation
import Testing

/// How history is stored (one blob of changes per commit) and when a PostgreSQL store rings
/// other stacks' listeners (`HistoryDoorbell`): the parts of Docs/History.md ("Turning it on", "Remote commits") that
/// the behaviour suites do not see.
struct HistoryEncodingTests {
    let graph = try! Model(Person.self, Pet.self).graph

    func change(_ kind: HistoryChange.Kind, _ entity: String, _ key: Int64, _ keys: Set<String> = []) -> HistoryChange {
        HistoryChange(kind: kind, objectID: ObjectID(rootEntity: graph.entity(named: entity)!.rootDescription, primaryKey: key),
                      entityName: entity, changedKeys: keys)
    }

    @Test func aCommitsChangesRoundTripThroughOneBlob() throws {
        let changes = [change(.update, "Person", 3, ["name", "age"]), change(.insert, "Pet", 7), change(.delete, "Person", 1),
                       change(.insert, "Person", 9), change(.update, "Person", 4, ["age", "name"]), change(.insert, "Pet", -2),
                       change(.update, "Pet", Int64.max, ["owner"])]
        let decoded = try HistoryEncoding.decode(HistoryEncoding.encode(changes), graph: graph)
        // Grouped by kind, entity and changed keys, in that order; keys in the order given.
        #expect(decoded == [change(.insert, "Person", 9), change(.insert, "Pet", 7), change(.insert, "Pet", -2),
                            change(.update, "Person", 3, ["name", "age"]), change(.update, "Person", 4, ["name", "age"]),
                            change(.update, "Pet", Int64.max, ["owner"]), change(.delete, "Person", 1)])
        #expect(try HistoryEncoding.decode(HistoryEncoding.encode([]), graph: graph).isEmpty)
    }

    /// A one-object commit's blob (encoded without the table of groups) is the layout the
    /// documentation gives, byte for byte: format 1; kind; the entity's name and the changed
    /// keys, sorted and joined by commas, each after its 4-byte length; one key; integers
    /// little-endian. Every other commit goes through the groups, checked above.
    @Test func aOneObjectCommitsBlobIsTheDocumentedLayout() throws {
        func le<T: FixedWidthInteger>(_ value: T) -> [UInt8] { withUnsafeBytes(of: value.littleEndian) { Array($0) } }
        let blob = HistoryEncoding.encode([change(.update, "Person", 258, ["name", "age"])])
        let expected: [UInt8] = [1, 1] + le(UInt32(6)) + Array("Person".utf8) + le(UInt32(8)) + Array("age,name".utf8)
            + le(UInt32(1)) + le(UInt64(258))
        #expect(Array(blob) == expected)
        #expect(try HistoryEncoding.decode(blob, graph: graph) == [change(.update, "Person", 258, ["name", "age"])])
    }

    @Test func anEntityTheModelNoLongerHasIsLeftOut() throws {
        let larger = try Model(Person.self, Pet.self, Article.self, Tag.self).graph
        let article = HistoryChange(kind: .insert, objectID: ObjectID(rootEntity: larger.entity(named: "Article")!.rootDescription, primaryKey: 5),
                                    entityName: "Article", changedKeys: [])
        let blob = HistoryEncoding.encode([change(.insert, "Person", 1), article, change(.insert, "Pet", 2)])
        #expect(try HistoryEncoding.decode(blob, graph: larger).map(\.entityName) == ["Article", "Person", "Pet"])
        #expect(try HistoryEncoding.decode(blob, graph: graph).map(\.entityName) == ["Person", "Pet"])
    }

    @Test func aBlobThatIsNotContextStacksIsReportedNotMisread() throws {
        let blob = HistoryEncoding.encode([change(.update, "Person", 3, ["name"]), change(.insert, "Pet", 7)])
        for broken in [blob.dropLast(), blob.prefix(5), Data([9]) + blob.dropFirst(), blob + Data([7])] {
            let error = try #require(throws: StoreError.self) { try HistoryEncoding.decode(Data(broken), graph: graph) }
            #expect(error.code == .corrupt)
            #expect(error.message.contains("history"))
        }
    }

    /// Every commit rings in its own transaction or is followed, within the interval, by a ring
    /// (a later commit's, or one sent alone when the scheduled time comes); and there is at most
    /// one ring per interval. Random commit times, the scheduled ring running when
    /// it is due or later (the writer's queue may be busy).
    @Test(arguments: 0..<50) func theDoorbellRingsForEveryCommitWithinAnInterval(seed: Int) {
        var random = SeededGenerator(seed: UInt64(seed))
        let interval = HistoryDoorbell.interval
        var doorbell = HistoryDoorbell()
        var now: UInt64 = 1_000_000_000
        var timer: UInt64?
        var rings: [UInt64] = []
        var waiting: [UInt64] = []
        var clock = now
        func fireTimer(upTo time: UInt64) {
            while let due = timer, due <= time {
                // Never before an event already simulated: time only goes forward.
                let late = max(due + UInt64.random(in: 0...(interval / 4), using: &random), clock)
                guard late <= time else { return }
                clock = late
                timer = nil
                switch doorbell.owedRing(at: late) {
                case .none: break
                case .later(let delay): timer = late + delay
                case .now: rings.append(late)
                }
            }
        }
        for _ in 0..<400 {
            now += [UInt64.random(in: 0...(interval / 3), using: &random), UInt64.random(in: 0...(3 * interval), using: &random)]
                .randomElement(using: &random)!
            fireTimer(upTo: now)
            clock = now
            switch doorbell.commit(at: now) {
            case .ring: rings.append(now)
            case .schedule(let delay):
                #expect(timer == nil, "a second ring scheduled while one is")
                timer = now + delay
                waiting.append(now)
            case .owed:
                #expect(timer != nil, "a commit waits for a ring nobody scheduled")
                waiting.append(now)
            }
        }
        fireTimer(upTo: UInt64.max / 2)
        #expect(timer == nil)
        for commit in waiting {
            // The scheduled ring may run up to a quarter interval late here (or later, behind a
            // commit simulated at the same time).
            #expect(rings.contains { $0 >= commit && $0 <= commit + interval + interval / 4 }, "a commit at \(commit) was not rung for in time")
        }
        // At most one ring per interval.
        for (earlier, later) in zip(rings, rings.dropFirst()) { #expect(later - earlier >= interval) }
    }

    /// Commits closer together than the interval never make a ring go out alone: a ring alone
    /// is a transaction of its own, with its wait for the disk, that the next commit queues
    /// behind. Each ring rides with the first commit an interval after the one before, and
    /// every commit is still rung for within the interval. Spacings from a tenth of the
    /// interval to nine tenths, the scheduled ring running exactly when due.
    @Test(arguments: [1, 3, 5, 6, 9]) func steadyCommitsCarryEveryRing(tenths: UInt64) {
        let interval = HistoryDoorbell.interval
        let spacing = interval * tenths / 10
        var doorbell = HistoryDoorbell()
        var timer: UInt64?
        var rings: [UInt64] = []
        var waiting: [UInt64] = []
        for commit in (1...200).map({ 1_000_000_000 + UInt64($0) * spacing }) {
            while let due = timer, due <= commit {
                timer = nil
                switch doorbell.owedRing(at: due) {
                case .none: break
                case .later(let delay): timer = due + delay
                case .now: Issue.record("a ring went out alone at \(due) between commits \(spacing) ns apart")
                }
            }
            switch doorbell.commit(at: commit) {
            case .ring: rings.append(commit)
            case .schedule(let delay): timer = commit + delay; waiting.append(commit)
            case .owed: waiting.append(commit)
            }
        }
        // After the last commit, the ring owed to the burst's tail goes out alone.
        while let due = timer {
            timer = nil
            switch doorbell.owedRing(at: due) {
            case .none: break
            case .later(let delay): timer = due + delay
            case .now: rings.append(due)
            }
        }
        #expect(rings.count > 1)
        for commit in waiting {
            #expect(rings.contains { $0 >= commit && $0 <= commit + interval }, "a commit at \(commit) was not rung for in time")
        }
    }

    /// A transaction that was to ring fails (its commit's write failed): its ring is never
    /// sent, and the commits that waited for a ring before it — written in earlier
    /// transactions — are owed one again: by the ring already scheduled, or by one scheduled
    /// now. Before 2026-11-26 they were forgotten, and reached other stacks only by their
    /// listeners' catch-up.
    @Test func aRingLostWithItsTransactionIsOwedAgain() {
        let interval = HistoryDoorbell.interval
        let start: UInt64 = 1_000_000_000
        var doorbell = HistoryDoorbell()
        #expect(doorbell.commit(at: start) == .ring(waiting: nil))
        // A commit half an interval later waits; its ring is scheduled for an interval later.
        let waiting = start + interval / 2
        #expect(doorbell.commit(at: waiting) == .schedule(interval))
        // Before that ring is due, a commit an interval after the last ring rings — and fails.
        let lost = start + interval + interval / 5
        #expect(doorbell.commit(at: lost) == .ring(waiting: waiting))
        #expect(doorbell.ringLost(.ring(waiting: waiting), at: lost) == nil, "the scheduled ring is still to come")
        #expect(doorbell.owedRing(at: waiting + interval) == .now)
        // The lost ring was never sent: the next commit (a retry, say) rings at once.
        var retried = HistoryDoorbell()
        #expect(retried.commit(at: start) == .ring(waiting: nil))
        #expect(retried.ringLost(.ring(waiting: nil), at: start + interval / 10) == nil)
        #expect(retried.commit(at: start + interval / 5) == .ring(waiting: nil))

        // With no ring scheduled any more, the loss schedules one, due once the first commit
        // that waited has waited an interval.
        var quiet = HistoryDoorbell()
        #expect(quiet.commit(at: start) == .ring(waiting: nil))
        #expect(quiet.commit(at: waiting) == .schedule(interval))
        #expect(quiet.owedRing(at: waiting + interval) == .now)
        let next = waiting + interval + interval / 2
        #expect(quiet.commit(at: next) == .schedule(interval))
        let ringing = waiting + 2 * interval + interval / 10
        #expect(quiet.owedRing(at: next + interval / 4) == .later(interval - interval / 4))
        #expect(quiet.commit(at: ringing) == .ring(waiting: next))
        #expect(quiet.owedRing(at: next + interval) == .none, "the commit's ring was for the waiting one")
        let failed = next + interval + interval / 10
        #expect(quiet.ringLost(.ring(waiting: next), at: failed) == 0, "the waiting commit waited an interval already")
        #expect(quiet.owedRing(at: failed) == .now)
    }

    /// A group commit queues the doorbell once, after its commits' savepoints: queued with the
    /// first commit, inside its savepoint, the ring went with it when that commit failed and
    /// was rolled back.
    @Test(.enabled(if: PostgresServer.isAvailable, "needs a PostgreSQL server: see PostgresServer"), .timeLimit(.minutes(1)))
    func aGroupCommitRingsAfterItsSavepoints() async throws {
        let store = try TestStore(.postgres)
        try store.refuseWrites(ofName: "refused")
        try ContextStack.Context(stack: store.stack).beginUpdateAndWait { update in
            try update.create(Person.self).name = "first"
            try update.commit()
        }
        try store.stack.flushAndWait()
        let statements = Locked<[String]>([])
        store.stack.trace { sql in statements.withLock { $0.append(sql) } }
        defer { store.stack.trace(nil) }
        // The writer's queue held: the three commits are written together.
        let postgres = try #require(store.stack.store as? PostgresStore)
        postgres.writeQueue.sync {}  // the fixture's drain may still be running
        postgres.writeQueue.suspend()
        var suspended = true
        defer { if suspended { postgres.writeQueue.resume() } }
        for name in ["refused", "Ada", "Grace"] {
            try ContextStack.Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false)).beginUpdateAndWait { update in
                try update.create(Person.self).name = name
                try update.commit()
            }
        }
        // An interval after the last ring: the group's transaction rings.
        usleep(UInt32(3 * HistoryDoorbell.interval / 1_000))
        postgres.writeQueue.resume()
        suspended = false
        #expect(throws: (any Error).self) { try store.stack.flushAndWait() }
        let written = statements.withLock { $0 }
        let ring = try #require(written.lastIndex { $0.contains("pg_notify") }, "\(written)")
        let lastSavepoint = try #require(written.lastIndex { $0.hasPrefix("RELEASE") }, "\(written)")
        #expect(ring > lastSavepoint, "\(written)")
        #expect(written.contains { $0.hasPrefix("ROLLBACK TO") }, "the refused commit was rolled back alone: \(written)")
        #expect(try store.writtenRows("SELECT name FROM \"Person\" ORDER BY name") == [[.text("Ada")], [.text("Grace")], [.text("first")]])
        // Docs/History.md: the group's transaction rings once; its commits' tokens share the
        // transaction's ID and follow commit order; the refused commit left no history.
        #expect(written.filter { $0.contains("pg_notify") }.count == 1, "\(written)")
        let url = try #require(store.database?.url)
        try await settleHistory(url)
        let history = try store.stack.history(after: nil)
        #expect(history.count == 3, "first, Ada and Grace")
        let group = Array(history.dropFirst())
        #expect(Set(group.map(\.token.position)).count == 1)
        let names = try group.map { transaction in
            try transaction.changes.map { change in try store.writtenScalar("SELECT name FROM \"Person\" WHERE \"Z_PK\" = \(change.objectID.primaryKey)") }
        }
        #expect(names == [[.text("Ada")], [.text("Grace")]], "in commit order")
    }

    /// The ring owed to the commits of a burst goes out alone, after their transactions: two
    /// commits back to back ring twice (the first in its transaction; the second in its own
    /// if an interval passed, or alone after it), whatever their timing.
    @Test(.enabled(if: PostgresServer.isAvailable, "needs a PostgreSQL server: see PostgresServer"), .timeLimit(.minutes(1)))
    func aBurstOfCommitsIsRungForAfterItsLast() async throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        let stack = try Stack(model: Model(Person.self, Pet.self))
        try stack.addPostgresStore(url: schema.url)
        let listener = try PostgresConnection(PostgresSettings(url: schema.url))
        let channel = try #require(try listener.scalar(PostgresStore.historyChannelSQL).stringValue)
        try listener.execute("LISTEN \(channel.quotedIdentifier)")
        let context = try Context(stack: stack, updateTarget: .persistentStore)
        for name in ["Ada", "Grace"] {
            try context.beginUpdateAndWait { update in
                try update.create(Person.self).name = name
                try update.commit()
            }
        }
        var rings: [String] = []
        for _ in 0..<3000 where rings.count < 2 {
            rings += try listener.takeNotifications()
            if rings.count < 2 { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(rings.count == 2)
        #expect(Set(rings).count == 1, "both rings name the store that rang")
    }
}
