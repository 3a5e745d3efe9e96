@testable import ContextStack
import ContextStackPostgres
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Dispatch
import Foundation
import Testing

/// `fetchOrCreate` on unique values, from update contexts that run at the same time.
@Suite(.timeLimit(.minutes(5))) struct FetchOrCreateConcurrencyTests {
    @Test(arguments: Setup.all) @MainActor
    func twoContextsThatBothCreateEndUpWithOneObject(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let commits = Locked<[Commit]>([])
        let token = harness.observeCommit { commit in commits.withLock { $0.append(commit) } }
        let a = harness.updater?.beginUpdateContext() ?? harness.world.beginUpdateContext()
        let b = harness.updater?.beginUpdateContext() ?? harness.world.beginUpdateContext()
        let first = try a.performAndWait { update in
            let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.com")
            monk.name = "A"
            monk.age = 63
            return monk.objectID
        }
        let second = try b.performAndWait { update in
            let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.com" && %"name" == "B")
            #expect(monk.isInserted)
            monk.location = "Taipei"
            return monk.objectID
        }
        // Both made the same object, so neither commit can duplicate it.
        #expect(first == second)
        try a.performAndWait { try $0.commit() }
        try b.performAndWait { try $0.commit() }
        try await harness.stack.flush()
        try await harness.settle()
        let people = try harness.world.fetchAll(Person.self)
        #expect(people.count == 1)
        let monk = try #require(people.first)
        #expect(monk.objectID == first)
        // Merged property by property: the later commit wins what it set, the rest stays.
        #expect(monk.name == "B" && monk.age == 63 && monk.location == "Taipei")
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Person\"") == .integer(1))
        await mainQueueTurn()
        let seen = commits.withLock { $0 }
        #expect(seen.map(\.inserted) == [[first], []])
        #expect(seen.last?.updated == [first])
        #expect(seen.last.map { $0.changedKeys(of: first) } == ["name", "location"])
        token.cancel()
    }

    @Test @MainActor func aClaimIsReleasedWhenItsObjectIsDeletedOrItsKeyChanges() async throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        let first = try world.beginUpdateAndWait { update in
            let object = try update.fetchOrCreate(Person.self, %"email" == "x@example.com")
            try update.commit()
            return object.objectID
        }
        try world.beginUpdateAndWait { update in
            try update.delete(#require(try update.fetch(Person.self, id: first)))
            try update.commit()
        }
        let second = try world.beginUpdateAndWait { update in
            let object = try update.fetchOrCreate(Person.self, %"email" == "x@example.com")
            try update.commit()
            return object.objectID
        }
        // A deleted object's ID is never brought back.
        #expect(second != first)
        try world.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: second)).email = "y@example.com"
            try update.commit()
        }
        let third = try world.beginUpdateAndWait { update in
            let object = try update.fetchOrCreate(Person.self, %"email" == "x@example.com")
            try update.commit()
            return object.objectID
        }
        #expect(third != second)
        try await store.stack.flush()
        #expect(try world.fetchAll(Person.self, orderBy: .ascending("email")).compactMap(\.email) == ["x@example.com", "y@example.com"])
    }

    /// A store, and two update contexts whose `fetchOrCreate`s of one email (the second's
    /// object named "Second") made the same object, not yet committed; its ID.
    private static func twoClaimants(_ kind: StoreKind) throws -> (TestStore, UpdateContext, UpdateContext, ObjectID) {
        let store = try TestStore(kind)
        let context = try Context(stack: store.stack)
        let first = context.beginUpdateContext()
        let second = context.beginUpdateContext()
        let mine = try first.performAndWait { try $0.fetchOrCreate(Person.self, %"email" == "a@example.com").objectID }
        let theirs = try second.performAndWait { update in
            let person = try update.fetchOrCreate(Person.self, %"email" == "a@example.com")
            person.name = "Second"
            return person.objectID
        }
        #expect(mine == theirs)
        return (store, first, second, mine)
    }

    /// Two updates' `fetchOrCreate`s of one value share an ID. When the first commits its
    /// object and then deletes it before the second commits, the second inserts it again, under
    /// the same ID, with its own values: a person with that value exists once it is saved, as
    /// the second update asked (Docs/Writing.md, "fetchOrCreate on unique keys").
    @Test(arguments: StoreKind.available)
    func aClaimedObjectDeletedBeforeTheOtherClaimantCommitsIsInsertedAgain(kind: StoreKind) throws {
        let (store, first, second, mine) = try Self.twoClaimants(kind)
        try first.performAndWait { update in
            try update.commit()
            try update.delete(#require(try update.fetch(Person.self, id: mine)))
            try update.commit()
        }
        try second.performAndWait { try $0.commit() }
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT \"Z_PK\", \"email\", \"name\" FROM \"Person\"")
                == [[.integer(mine.primaryKey), .text("a@example.com"), .text("Second")]])
    }

    /// Two updates' `fetchOrCreate`s of one value share an ID. When the first commits its
    /// object and then gives it another value before the second commits, the second no longer
    /// describes that row: its commit throws `MergeConflictError` naming the value, and the
    /// renamed person stays. Before, the second's values were merged into the row, and the
    /// rename was silently undone.
    @Test(arguments: StoreKind.available)
    func aClaimedObjectRenamedBeforeTheOtherClaimantCommitsIsAConflict(kind: StoreKind) throws {
        let (store, first, second, mine) = try Self.twoClaimants(kind)
        try first.performAndWait { update in
            try update.commit()
            try #require(try update.fetch(Person.self, id: mine)).email = "b@example.com"
            try update.commit()
        }
        let conflict = try #require(throws: MergeConflictError.self) {
            try second.performAndWait { try $0.commit() }
        }
        #expect(conflict.conflicts.map(\.key) == ["email"], "\(conflict)")
        #expect(conflict.description.contains("another fetchOrCreate") && !conflict.description.contains(".error"), "\(conflict)")
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT \"email\", \"name\" FROM \"Person\"") == [[.text("b@example.com"), .text("")]])
    }

    /// Values that a commit still waiting for the writer took from a row are free: a
    /// `fetchOrCreate` for them makes a new object, and does not merge into the row that held
    /// them when it was last written. Another connection's transaction holds the writer back,
    /// so the first commit is certainly still queued when the second checks.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func valuesAQueuedCommitTookFromARowAreFree(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let first = try world.beginUpdateAndWait { update in
            let object = try update.fetchOrCreate(Person.self, %"email" == "x@example.com")
            object.name = "First"
            try update.commit()
            return object.objectID
        }
        try await store.stack.flush()
        let release = try store.holdTheWriterFromOutside(locking: first)
        try world.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: first)).email = "y@example.com"
            try update.commit()
        }
        let second = try world.beginUpdateAndWait { update in
            let object = try update.fetchOrCreate(Person.self, %"email" == "x@example.com")
            #expect(object.isInserted)
            object.name = "Second"
            try update.commit()
            return object.objectID
        }
        try release()
        try await store.stack.flush()
        await mainQueueTurn()
        #expect(second != first)
        #expect(try store.writtenRows("SELECT name, email FROM \"Person\" ORDER BY email")
            == [[.text("Second"), .text("x@example.com")], [.text("First"), .text("y@example.com")]])
        #expect(try world.fetchAll(Person.self, orderBy: .ascending("email")).map(\.objectID) == [second, first])
    }

    /// Many updates race on a few addresses; each pair of racers is held at a barrier after
    /// both fetched, so every round really overlaps. No duplicate, no error, nothing lost.
    @Test(arguments: [Topology.threeTier, .threeTierWithoutRoot, .perConsumer]) @MainActor
    func racingFetchOrCreateNeverDuplicates(topology: Topology) async throws {
        let harness = try TopologyHarness(topology)
        let recorder = ErrorRecorder()
        harness.stack.onError = { recorder.record($0) }
        let world = harness.world
        let updater = harness.updater
        let rounds = 40
        let failures = Locked<[any Error]>([])
        for round in 0..<rounds {
            let fetched = [DispatchSemaphore(value: 0), DispatchSemaphore(value: 0)]
            await onThreads(2) { racer in
                do {
                    let block: (Update) throws -> Void = { update in
                        let person = try update.fetchOrCreate(Person.self, %"email" == "user\(round % 7)@example.com")
                        person.age += 1
                        person.name = "racer\(racer)"
                        // Both racers have fetched before either commits.
                        fetched[racer].signal()
                        fetched[1 - racer].wait()
                        try update.commit()
                    }
                    if let updater { try updater.beginUpdateAndWait(block) } else { try world.beginUpdateAndWait(block) }
                } catch {
                    failures.withLock { $0.append(error) }
                }
            }
        }
        try await harness.stack.flush()
        try await harness.settle()
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        #expect(recorder.all.isEmpty)
        let people = try harness.world.fetchAll(Person.self)
        #expect(people.count == 7)
        #expect(Set(people.compactMap(\.email)).count == 7)
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Person\"") == .integer(7))
    }
}
