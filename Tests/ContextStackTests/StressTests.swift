@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Dispatch
import Foundation
import Testing

/// Concurrency under load: nothing lost, nothing torn.
@Suite(.timeLimit(.minutes(5))) struct StressTests {
    @Test(arguments: [Topology.threeTier, .threeTierWithoutRoot, .twoTierAutoMerge, .perConsumer])
    func serialIncrementsFromEightThreadsLoseNothing(topology: Topology) async throws {
        let harness = try await MainActor.run { try TopologyHarness(topology, order: .serial) }
        let id = try await MainActor.run {
            try harness.update { update in
                let counter = try update.create(Pet.self)
                try update.commit()
                return counter.objectID
            }
        }
        let updater: any Sendable = harness.updater ?? harness.world
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    for _ in 0..<50 {
                        let increment: (Update) throws -> Void = { update in
                            try #require(try update.fetch(Pet.self, id: id)).age += 1
                            try update.commit()
                        }
                        if let context = updater as? Context {
                            try? context.beginUpdateAndWait(increment)
                        } else if let main = updater as? MainContext {
                            try? main.beginUpdateAndWait(increment)
                        }
                    }
                }
            }
        }
        try await harness.stack.flush()
        let stored = try harness.store.writtenScalar("SELECT age FROM \"Pet\"")
        #expect(stored == .integer(400))
    }

    @Test func concurrentChangesToDifferentPropertiesAreAllKept() async throws {
        let harness = try await MainActor.run { try TopologyHarness(.threeTier) }
        let id = try await MainActor.run {
            try harness.update { update in
                let sample = try update.create(Sample.self)
                try update.commit()
                return sample.objectID
            }
        }
        let world = harness.world
        let bumps: [@Sendable (Sample) -> Void] = [
            { $0.int += 1 }, { $0.int16 += 1 }, { $0.int32 += 1 }, { $0.int64 += 1 },
            { $0.double += 1 }, { $0.float += 1 }, { $0.optionalInt = ($0.optionalInt ?? 0) + 1 },
            { $0.optionalDouble = ($0.optionalDouble ?? 0) + 1 },
        ]
        await withTaskGroup(of: Void.self) { group in
            for bump in bumps {
                group.addTask {
                    for _ in 0..<25 {
                        try? world.beginUpdateAndWait { update in
                            bump(try #require(try update.fetch(Sample.self, id: id)))
                            try update.commit()
                        }
                    }
                }
            }
        }
        try await harness.stack.flush()
        let row = try harness.store.writtenRows("SELECT int, int16, int32, int64, double, float, \"optionalInt\", \"optionalDouble\" FROM \"Sample\"")
        #expect(row.first?.compactMap(\.doubleValue) == Array(repeating: 25, count: 8))
    }

    @Test func conflictsUnderErrorPolicyNeverStoreHalfACommit() async throws {
        let harness = try await MainActor.run { try TopologyHarness(.threeTier, policy: .error) }
        let id = try await MainActor.run {
            try harness.update { update in
                let counter = try update.create(Pet.self)
                try update.commit()
                return counter.objectID
            }
        }
        let world = harness.world
        let conflicts = Locked(0)
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var done = 0
                    while done < 10 {
                        do {
                            try world.beginUpdateAndWait { update in
                                let counter = try #require(try update.fetch(Pet.self, id: id))
                                counter.age += 1
                                // Each increment also logs itself: a commit lands whole or not at all.
                                try update.create(Coin.self).value = counter.age
                                try update.commit()
                            }
                            done += 1
                        } catch is MergeConflictError {
                            conflicts.withLock { $0 += 1 }
                        } catch {
                            Issue.record(error)
                            return
                        }
                    }
                }
            }
        }
        try await harness.stack.flush()
        let db = try harness.store.rawConnection()
        #expect(try db.scalar("SELECT age FROM Pet") == .integer(80))
        #expect(try db.scalar("SELECT count(*) FROM Coin") == .integer(80))
        #expect(try db.scalar("SELECT count(DISTINCT value) FROM Coin") == .integer(80))
        print("conflicts thrown and retried: \(conflicts.withLock { $0 })")
    }

    /// Each commit sets both objects to the same number: a reader must never see them differ.
    @Test(arguments: [Topology.threeTier, .twoTierAutoMerge, .threeTierWithoutRoot]) @MainActor
    func aReaderOnTheMainActorSeesEachCommitWholly(topology: Topology) async throws {
        let harness = try TopologyHarness(topology)
        try harness.update { update in
            try update.create(Pet.self).name = "a"
            try update.create(Pet.self).name = "b"
            try update.commit()
        }
        let world = harness.world
        let writer = Task.detached {
            for value in 1...150 {
                try world.beginUpdateAndWait { update in
                    for pet in try update.fetchAll(Pet.self) { pet.age = value }
                    try update.create(Coin.self).value = value
                    try update.commit()
                }
            }
        }
        var reads = 0
        var last = 0
        while true {
            let pets = try world.fetchAll(Pet.self, orderBy: .ascending("name"))
            #expect(pets.count == 2)
            #expect(pets[0].age == pets[1].age, "torn read at \(pets[0].age) / \(pets[1].age)")
            #expect(pets[0].age >= last)
            let coins = try world.fetchCount(Coin.self)
            #expect(coins >= pets[0].age)
            last = pets[0].age
            reads += 1
            if last == 150 { break }
            await Task.yield()
        }
        try await writer.value
        #expect(reads > 0)
    }
}

@Suite(.timeLimit(.minutes(5))) struct GroupCommitTests {
    /// Docs/Servers.md, "Setting up a stack in a server": the `transaction`s of concurrent
    /// requests on one `.persistentStore` context are written together, in one database
    /// transaction (the first may be taken alone, before the others queue), and each returns
    /// once its commit is written.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func aServerContextsConcurrentTransactionsShareADatabaseTransaction(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let queued = try #require(store.stack.store as? any QueuedStore)
        let context = try Context(stack: store.stack, updateTarget: .persistentStore)
        // Also reserves a block of keys, which the commits below would need the writer for.
        try await context.transaction { update in try update.create(Person.self).name = "seed" }
        let transactionsBefore = queued.state.withLock { $0.transactionCount }
        let handedOverBefore = store.commitsHandedOver
        let holding = Locked(false)
        let release = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            try? store.holdingTheWriter {
                holding.withLock { $0 = true }
                release.wait()
            }
        }
        while !holding.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(1)) }
        let requests = (0..<5).map { index in
            Task.detached {
                try await context.transaction { update in try update.create(Person.self).name = "p\(index)" }
            }
        }
        while store.commitsHandedOver - handedOverBefore < 5 { try await Task.sleep(for: .milliseconds(1)) }
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Person\"") == .integer(1), "none is written while the writer is held")
        release.signal()
        for request in requests { try await request.value }
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Person\"") == .integer(6), "each returned once written")
        #expect(queued.state.withLock { $0.transactionCount } - transactionsBefore <= 2)
    }

    /// Commits that reach the writer while it is busy share one transaction; one that fails
    /// (a write SQLite refuses) fails alone, and observers hear of every commit.
    @Test @MainActor func commitsQueuedTogetherShareATransactionAndFailAlone() async throws {
        let store = try TestStore(.file)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let world = try MainContext(stack: store.stack)
        try store.refuseWrites(ofName: "refused")
        try world.beginUpdateAndWait { update in
            // Also reserves a block of keys, which the commits below need the writer for.
            try update.create(Person.self).name = "seed"
            try update.commit()
        }
        try await store.stack.flush()
        let before = store.stack.sqliteStore.transactionCount
        let observed = Locked(0)
        let undone = Locked(0)
        let token = world.observeCommit { commit in
            observed.withLock { $0 += 1 }
            undone.withLock { $0 += commit.deleted.count }
        }
        // Hold the writer while five commits queue up behind it.
        try store.stack.sqliteStore.writer.withLock { _ in
            for index in 0..<5 {
                try world.beginUpdateAndWait { update in
                    let person = try update.create(Person.self)
                    person.name = index == 2 ? "refused" : "p\(index)"
                    try update.commit()
                }
            }
        }
        try? await store.stack.flush()
        await mainQueueTurn()
        // The first commit may start a batch of its own before the others queue behind it.
        #expect(store.stack.sqliteStore.transactionCount - before <= 2)
        #expect(recorder.all.count == 1)
        #expect((recorder.all.first as? SQLiteError)?.code.primary == .constraint)
        let db = try store.rawConnection()
        #expect(try db.rows("SELECT name FROM Person ORDER BY name").map { $0[0] } == ["p0", "p1", "p3", "p4", "seed"])
        // The five commits, and what undoes the failed one (its insert deleted), which observers
        // and merging main contexts took when it was announced.
        #expect(observed.withLock { $0 } == 6)
        #expect(undone.withLock { $0 } == 1)
        withExtendedLifetime(token) {}
    }

    /// Docs/Topologies.md, "Group commit": a commit of a group that clashes with what another
    /// process saved after it was handed over (here the same unique email) fails alone, with
    /// `.uniquenessViolated` through `onError`; the group's other commits are stored.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aCommitClashingWithAnotherProcessFailsAloneInItsGroup(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "seed"
            try update.commit()
        }
        try await store.stack.flush()
        let other = try store.reopen()
        try store.holdingTheWriter {
            for index in 0..<3 {
                try world.beginUpdateAndWait { update in
                    let person = try update.create(Person.self)
                    (person.name, person.email) = ("p\(index)", index == 1 ? "ada@example.com" : nil)
                    try update.commit()
                }
            }
            try ContextStack.Context(stack: other, updateTarget: .persistentStore).beginUpdateAndWait { update in
                let ada = try update.create(Person.self)
                (ada.name, ada.email) = ("Ada elsewhere", "ada@example.com")
                try update.commit()
            }
        }
        try? await store.stack.flush()
        #expect(recorder.all.count == 1, "\(recorder.all)")
        #expect((recorder.all.first as? SaveError)?.code == .uniquenessViolated, "\(recorder.all)")
        #expect(try store.writtenRows("SELECT name FROM \"Person\" ORDER BY name") == [["Ada elsewhere"], ["p0"], ["p2"], ["seed"]])
    }
}
