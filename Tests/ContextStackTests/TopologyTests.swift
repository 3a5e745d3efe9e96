@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// One set of behaviours, run on every topology.
@Suite(.timeLimit(.minutes(5))) struct TopologyBehaviourTests {
    @Test(arguments: Setup.all) @MainActor
    func createUpdateAndDeleteReachTheReader(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        try harness.update { update in
            for (name, age) in [("Farmer", 28), ("Knight", 18), ("Monk", 63)] {
                let person = try update.create(Person.self)
                person.name = name
                person.age = age
            }
            try update.commit()
        }
        try await harness.settle()
        #expect(try harness.world.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["Farmer", "Knight", "Monk"])
        try harness.update { update in
            try #require(try update.fetch(Person.self, %"name" == "Monk")).age = 64
            try update.delete(#require(try update.fetch(Person.self, %"name" == "Knight")))
            try update.commit()
        }
        try await harness.settle()
        #expect(try harness.world.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["Farmer", "Monk"])
        #expect(try harness.world.fetch(Person.self, %"name" == "Monk")?.age == 64)
        try await harness.stack.flush()
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Person\"") == .integer(2))
    }

    @Test(arguments: Setup.all) @MainActor
    func relationshipsAndDeleteRulesBehaveTheSame(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        try harness.update { update in
            let farmer = try update.create(Person.self)
            farmer.name = "Farmer"
            let knight = try update.create(Person.self)
            knight.name = "Knight"
            knight.friend = farmer
            try update.create(Pet.self).owner = farmer
            try update.commit()
        }
        try await harness.settle()
        let farmer = try #require(try harness.world.fetch(Person.self, %"name" == "Farmer"))
        #expect(farmer.friendOf.map(\.name) == ["Knight"])
        #expect(farmer.pets.count == 1)
        try harness.update { update in
            try update.delete(#require(try update.fetch(Person.self, %"name" == "Farmer")))
            try update.commit()
        }
        try await harness.settle()
        #expect(try harness.world.fetchCount(Pet.self) == 0)
        #expect(try harness.world.fetch(Person.self, %"name" == "Knight")?.friend == nil)
    }

    @Test(arguments: Setup.all) @MainActor
    func observersReceiveEachCommitWithItsPayload(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let received = Locked<[Commit]>([])
        let everything = Locked<[Commit]>([])
        let token = harness.observeCommit { commit in received.withLock { $0.append(commit) } }
        let all = harness.stack.observeCommit { commit in everything.withLock { $0.append(commit) } }
        let (farmer, knight) = try harness.update { update in
            let farmer = try update.create(Person.self)
            let knight = try update.create(Person.self)
            try update.commit()
            return (farmer.objectID, knight.objectID)
        }
        try harness.update { update in
            try #require(try update.fetch(Person.self, id: farmer)).age = 30
            try update.delete(#require(try update.fetch(Person.self, id: knight)))
            try update.commit()
        }
        try harness.update { update in try update.commit() }  // nothing changed: no commit to tell
        await mainQueueTurn()
        let commits = received.withLock { $0 }
        #expect(commits.count == 2)
        #expect(Set(commits.first?.inserted ?? []) == [farmer, knight])
        #expect(commits.first?.inserted(Person.self).count == 2)
        #expect(commits.last?.updated == [farmer])
        #expect(commits.last?.changedKeys(of: farmer) == ["age"])
        #expect(commits.last?.deleted == [knight])
        #expect(commits.allSatisfy { $0.origin == harness.source.contextID })
        #expect(everything.withLock { $0.count } == 2)
        withExtendedLifetime((token, all)) {}
    }

    @Test(arguments: Setup.all) @MainActor
    func aThrowingUpdateRollsBackEverywhere(setup: Setup) async throws {
        struct Boom: Error {}
        let harness = try TopologyHarness(setup)
        #expect(throws: Boom.self) {
            try harness.update { update in
                try update.create(Pet.self).name = "Ghost"
                throw Boom()
            }
        }
        try await harness.stack.flush()
        try await harness.settle()
        #expect(try harness.world.fetchCount(Pet.self) == 0)
    }

    @Test(arguments: Setup.all) @MainActor
    func transactionIsDurableWhenItReturns(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        _ = try await harness.transaction { update in try update.create(Pet.self).name = "Rex" }
        #expect(try harness.store.writtenScalar("SELECT name FROM \"Pet\"") == .text("Rex"))
        try await harness.settle()
        #expect(try harness.world.fetch(Pet.self)?.name == "Rex")
    }

    @Test(arguments: Setup.files) @MainActor
    func aReopenedStoreHoldsEverything(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        try harness.update { update in
            for index in 0..<10 { try update.create(Pet.self).age = index }
            try update.commit()
        }
        let reopened = try MainContext(stack: harness.store.reopen())
        #expect(try reopened.fetchAll(Pet.self, orderBy: .ascending("age")).map(\.age) == Array(0..<10))
    }
}

@Suite(.timeLimit(.minutes(5))) struct TopologyTests {
    @Test @MainActor func autoMergeRefreshesObjectsShowsInsertsAndFlagsDeletions() async throws {
        let harness = try TopologyHarness(.twoTierAutoMerge)
        try harness.update { update in
            try update.create(Person.self).name = "Monk"
            try update.create(Person.self).name = "Warrior"
            try update.commit()
        }
        let monk = try #require(try harness.world.fetch(Person.self, %"name" == "Monk"))
        let warrior = try #require(try harness.world.fetch(Person.self, %"name" == "Warrior"))
        // A commit from another context into the root: the auto-merging main context merges it too.
        let other = try Context(stack: harness.stack, updateTarget: .rootContext(autoMerge: true))
        try other.beginUpdateAndWait { update in
            try update.use(monk).age = 44
            try update.delete(update.use(warrior))
            try update.create(Person.self).name = "Farmer"
            try update.commit()
        }
        try await harness.stack.flush()
        await mainQueueTurn()
        #expect(monk.age == 44)
        #expect(warrior.isDeleted)
        #expect(warrior.name == "Warrior")
        #expect(try harness.world.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["Farmer", "Monk"])
    }

    @Test(arguments: [Topology.twoTierWithoutMerge, .perConsumer]) @MainActor
    func aMainContextThatDoesNotMergeSeesNothingUntilItResets(topology: Topology) async throws {
        let harness = try TopologyHarness(topology)
        let quiet = try MainContext(stack: harness.stack, updateTarget: topology == .perConsumer ? .persistentStore : .rootContext(autoMerge: false))
        try harness.update { update in
            try update.create(Person.self).name = "Monk"
            try update.create(Person.self).name = "Warrior"
            try update.create(Article.self).tags = [try update.create(Tag.self)]
            try update.commit()
        }
        #expect(try quiet.fetchCount(Person.self) == 0)
        quiet.reset()
        let monk = try #require(try quiet.fetch(Person.self, %"name" == "Monk"))
        let tag = try #require(try quiet.fetch(Tag.self))
        #expect(tag.articles.count == 1)
        try harness.update { update in
            try #require(try update.fetch(Person.self, %"name" == "Monk")).age = 44
            try update.delete(#require(try update.fetch(Person.self, %"name" == "Warrior")))
            try update.create(Person.self).name = "Farmer"
            try #require(try update.fetch(Article.self)).tags = []
            try update.commit()
        }
        try await harness.stack.flush()
        #expect(monk.age == 0)
        #expect(try quiet.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["Monk", "Warrior"])
        #expect(try quiet.fetchCount(Person.self, %"age" == 44) == 0)
        #expect(try quiet.fetch(Person.self, %"name" == "Monk")?.age == 0)
        #expect(try quiet.fetch(Tag.self)?.articles.count == 1)
        quiet.reset()
        #expect(try quiet.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["Farmer", "Monk"])
        #expect(try quiet.fetch(Person.self, %"name" == "Monk")?.age == 44)
        #expect(try quiet.fetch(Tag.self)?.articles.count == 0)
    }

    @Test @MainActor func persistentStoreWritesSQLiteBeforeCommitReturns() throws {
        let store = try TestStore(.file)  // with a root: the update still bypasses it
        let updater = try Context(stack: store.stack, updateTarget: .persistentStore)
        let db = try store.rawConnection()
        try updater.beginUpdateAndWait { update in
            try update.create(Pet.self).name = "Rex"
            try update.commit()
            #expect(try db.scalar("SELECT count(*) FROM Pet") == .integer(1))
        }
    }

    @Test @MainActor func resetOnCommitOfResetsBeforeObserversRun() async throws {
        let harness = try TopologyHarness(.perConsumer)
        let updater = try #require(harness.updater)
        let screen = harness.world
        let before = try screen.fetchAll(Pet.self)
        #expect(before.isEmpty)
        let seen = Locked<[Int]>([])
        let token = updater.observeCommit { _ in
            MainActor.assumeIsolated {
                seen.withLock { $0.append((try? screen.fetchCount(Pet.self)) ?? -1) }
            }
        }
        try updater.beginUpdateAndWait { update in
            try update.create(Pet.self).name = "Rex"
            try update.commit()
        }
        await mainQueueTurn()
        #expect(seen.withLock { $0 } == [1])
        withExtendedLifetime(token) {}
    }

    /// Docs/Errors.md: `StackError.unsupportedTopology`, with a message naming what works instead.
    @Test func topologiesThatCannotWorkThrowAtInit() async throws {
        let noRoot = try TestStore(.memory, rootContext: .none)
        func refused(_ fix: String) -> (any Error) -> Bool {
            { error in
                guard let error = error as? StackError else { return false }
                return error.code == .unsupportedTopology && error.message.contains(fix)
            }
        }
        await MainActor.run {
            #expect(performing: { try MainContext(stack: noRoot.stack, updateTarget: .rootContext(autoMerge: true)) }, throws: refused("rootContext: .shared"))
            #expect(performing: { try MainContext(stack: noRoot.stack, updateTarget: .rootContext(autoMerge: false)) }, throws: refused("rootContext: .shared"))
        }
        #expect(performing: { try Context(stack: noRoot.stack, updateTarget: .rootContext(autoMerge: false)) }, throws: refused("rootContext: .shared"))
        #expect(performing: { try Context(stack: noRoot.stack, updateTarget: .mainContext) }, throws: refused("use a MainContext"))
        #expect(throws: Never.self) { try Context(stack: noRoot.stack, updateTarget: .persistentStore) }
    }

    @Test @MainActor func releasingTheTokenStopsObserving() async throws {
        let harness = try TopologyHarness(.threeTier)
        let count = Locked(0)
        var token: CommitObservation? = harness.world.observeCommit { _ in count.withLock { $0 += 1 } }
        try harness.update { update in try update.create(Pet.self); try update.commit() }
        await mainQueueTurn()
        #expect(count.withLock { $0 } == 1)
        token = nil
        try harness.update { update in try update.create(Pet.self); try update.commit() }
        await mainQueueTurn()
        #expect(count.withLock { $0 } == 1)
        _ = token
    }

    @Test @MainActor func commitsAreAnAsyncSequence() async throws {
        let harness = try TopologyHarness(.perConsumer)
        let updater = try #require(harness.updater)
        let stream = updater.commits
        async let firstTwo: [Commit] = {
            var result: [Commit] = []
            for await commit in stream {
                result.append(commit)
                if result.count == 2 { break }
            }
            return result
        }()
        for name in ["a", "b"] {
            try updater.beginUpdateAndWait { update in
                try update.create(Pet.self).name = name
                try update.commit()
            }
        }
        let commits = await firstTwo
        #expect(commits.map(\.inserted.count) == [1, 1])
    }
}
