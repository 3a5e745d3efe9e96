@testable import ContextStack
import Dispatch
import Foundation
import Testing

/// Behaviours a code review found broken, pinned so they stay fixed.
@Suite(.timeLimit(.minutes(2))) struct ReviewRegressionTests {
    /// Blocks performed on a long-lived serial context while it waits for its turn run after
    /// the turn comes, in order, and never alongside another update of the same context.
    @Test @MainActor func aSerialContextWaitingForItsTurnKeepsItsBlocksInOrder() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack, updateOrder: .serial)
        let log = Locked<[String]>([])
        let release = DispatchSemaphore(value: 0)
        let holding = DispatchSemaphore(value: 0)
        world.beginUpdate { _ in
            log.withLock { $0.append("other") }
            holding.signal()
            release.wait()
            log.withLock { $0.append("other done") }
        }
        holding.wait()
        let context = world.beginUpdateContext()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            context.perform { _ in log.withLock { $0.append("A") } }
            context.perform { _ in
                log.withLock { $0.append("B") }
                done.resume()
            }
            release.signal()
        }
        #expect(log.withLock { $0 } == ["other", "other done", "A", "B"])
    }

    /// A public read that never reaches the store must not leave the main context to catch up
    /// in the middle of later code (a relationship load, say).
    @Test @MainActor func heldObjectsChangeOnlyAtReads() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let farmer = try update.create(Person.self)
            try update.create(Pet.self).owner = farmer
            try update.commit()
        }
        let farmer = try #require(try world.fetch(Person.self))
        let pet = try #require(try world.fetch(Pet.self))
        // A commit from another thread: handed to the main context, not yet applied.
        DispatchQueue.global().sync {
            try? world.beginUpdateAndWait { update in
                try update.use(pet).age = 7
                try update.commit()
            }
        }
        _ = try world.fetch(Pet.self, id: pet.objectID)  // already held: no store read
        _ = farmer.pets                                  // an internal read
        #expect(pet.age == 0)
        _ = try world.fetchAll(Pet.self)                 // a public read catches up
        #expect(pet.age == 7)
    }

    /// Without a root, a commit whose write fails throws, and the main context never shows it.
    @Test @MainActor func aFailedWriteWithoutRootIsNotHandedToTheMainContext() throws {
        let store = try TestStore(.file, rootContext: .none)
        let world = try MainContext(stack: store.stack)
        try store.refuseWrites(ofName: "refused")
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "a"
            try update.create(Pet.self).name = "Rex"
            try update.commit()
        }
        let rex = try #require(try world.fetch(Pet.self))
        #expect(throws: SQLiteError.self) {
            try world.beginUpdateAndWait { update in
                try update.use(rex).name = "Renamed"
                try update.create(Person.self).name = "refused"
                try update.commit()
            }
        }
        #expect(rex.name == "Rex")
        #expect(try world.fetch(Pet.self)?.name == "Rex")
        #expect(try world.fetchCount(Person.self) == 1)
    }

    /// A commit that changes only a many-to-many relationship reports both objects as
    /// updated, under their relationships' names.
    @Test @MainActor func aManyToManyChangeIsReportedOnBothSides() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let (article, tag) = try world.beginUpdateAndWait { update in
            let article = try update.create(Article.self)
            let tag = try update.create(Tag.self)
            try update.commit()
            return (article.objectID, tag.objectID)
        }
        let commits = Locked<[Commit]>([])
        let token = world.observeCommit { commit in commits.withLock { $0.append(commit) } }
        try world.beginUpdateAndWait { update in
            try #require(try update.fetch(Article.self, id: article)).tags = [try #require(try update.fetch(Tag.self, id: tag))]
            try update.commit()
        }
        await mainQueueTurn()
        let commit = try #require(commits.withLock { $0 }.first)
        #expect(Set(commit.updated) == [article, tag])
        #expect(commit.changedKeys(of: article) == ["tags"])
        #expect(commit.changedKeys(of: tag) == ["articles"])
        withExtendedLifetime(token) {}
    }

    /// A transaction whose body commits by itself too waits for, and reports, every commit.
    @Test @MainActor func aTransactionReportsTheFailureOfAnEarlierCommitInItsBody() async throws {
        let store = try TestStore(.file)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let world = try MainContext(stack: store.stack)
        try store.refuseWrites(ofName: "refused")
        await #expect(throws: SQLiteError.self) {
            try await world.transaction { update in
                try update.create(Person.self).name = "refused"
                try update.commit()  // fails when written
                try update.create(Pet.self).name = "fine"
            }
        }
        #expect(recorder.all.isEmpty)
    }
}
