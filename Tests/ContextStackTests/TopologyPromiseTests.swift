@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// What Docs/Topologies.md says about who sees which commit, and what a `Commit` carries, for
/// the combinations the behaviour suites do not reach: a three-tier and an auto-merging main
/// context on one stack, a pinned view made while the root holds unwritten commits, a
/// non-merging main context that writes to the store, and the order of observers and streams.
@Suite(.timeLimit(.minutes(2))) struct TopologyPromiseTests {
    /// Creates a person named `name` through `context`'s update, and returns its ID.
    @MainActor private func create(_ name: String, in context: MainContext) throws -> ObjectID {
        try context.beginUpdateAndWait { update in
            let person = try update.create(Person.self)
            person.name = name
            try update.commit()
            return person.objectID
        }
    }

    /// "Auto-merge": an auto-merging main context merges the commits of a three-tier main
    /// context's updates (they go through the root), so an object it holds shows them from its
    /// next read; a `.persistentStore` commit skips the root, and the object it holds keeps
    /// its old value until a fetch returns it.
    @Test(arguments: StoreKind.available) @MainActor
    func anAutoMergingContextMergesAThreeTierContextsCommitsAndNotTheStoresOwn(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let threeTier = try MainContext(stack: store.stack)
        let auto = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: true))
        let ann = try create("Ann", in: threeTier)
        let held = try #require(try auto.fetch(Person.self, id: ann))

        try threeTier.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: ann)).age = 30
            try update.commit()
        }
        _ = try auto.fetchCount(Pet.self)    // a read of something else
        #expect(held.age == 30)

        try Context(stack: store.stack, updateTarget: .persistentStore).beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: ann)).age = 40
            try update.commit()
        }
        _ = try auto.fetchCount(Pet.self)
        await mainQueueTurn()
        #expect(held.age == 30, "a .persistentStore commit was merged")
        #expect(try auto.fetch(Person.self, %"name" == "Ann")?.age == 40, "a fetch returns it with the stored value")
    }

    /// "Two-tier without merge": a pinned view shows the store as it was when the context was
    /// made, commits the root had accepted but not written included, and keeps showing them
    /// once they are written, while later commits stay out of it.
    @Test @MainActor func aPinnedViewMadeWhileACommitIsUnwrittenShowsIt() async throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        _ = try create("Ann", in: world)
        try await store.stack.flush()
        let quiet = try store.holdingTheWriter {
            _ = try create("Bob", in: world)
            let quiet = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
            #expect(try quiet.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["Ann", "Bob"])
            return quiet
        }
        try await store.stack.flush()
        _ = try create("Cy", in: world)
        try await store.stack.flush()
        #expect(try store.writtenScalar("SELECT count(*) FROM Person") == .integer(3))
        #expect(try quiet.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["Ann", "Bob"])
        quiet.reset()
        #expect(try quiet.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["Ann", "Bob", "Cy"])
    }

    /// "Combinations that throw", the combination that works: a main context with
    /// `updateTarget: .persistentStore` on a stack with a root has written its commit when
    /// `commit()` returns, and, not merging, sees it only once it resets.
    @Test(arguments: StoreKind.available) @MainActor
    func aMainContextThatWritesToTheStoreSeesItsCommitsAfterAReset(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let direct = try MainContext(stack: store.stack, updateTarget: .persistentStore)
        #expect(try direct.fetchCount(Person.self) == 0)
        _ = try create("Ann", in: direct)
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Person\"") == .integer(1), "commit() returned before the write")
        #expect(try direct.fetchCount(Person.self) == 0)
        direct.reset()
        #expect(try direct.fetchCount(Person.self) == 1)
    }

    /// "Two-tier, without merge": a main context whose updates commit to the root and that does
    /// not merge shows not even its own commits until it resets, though they are written.
    @Test(arguments: StoreKind.available) @MainActor
    func aMainContextThatCommitsToTheRootWithoutMergingSeesItsCommitsAfterAReset(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let quiet = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        #expect(try quiet.fetchCount(Person.self) == 0)
        _ = try create("Ann", in: quiet)
        try await store.stack.flush()
        await mainQueueTurn()
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Person\"") == .integer(1))
        #expect(try quiet.fetchCount(Person.self) == 0)
        quiet.reset()
        #expect(try quiet.fetchCount(Person.self) == 1)
    }

    /// "Two-tier, without merge": a main context made before the stack had a store pins its
    /// view at its first read, and shows what was committed before that read, not after.
    @Test @MainActor func aMainContextMadeBeforeTheStorePinsItsViewAtItsFirstRead() async throws {
        let (directory, url) = try makeStoreLocation()
        defer { removeTemporaryDirectory(directory) }
        let stack = try Stack(model: Model(fullModelTypes))
        let quiet = try MainContext(stack: stack, updateTarget: .rootContext(autoMerge: false))
        try stack.addDatabaseStore(at: url)
        let writer = try Context(stack: stack, updateTarget: .persistentStore)
        func commit(_ name: String) throws {
            try writer.beginUpdateAndWait { update in
                try update.create(Person.self).name = name
                try update.commit()
            }
        }
        try commit("Ann")
        #expect(try quiet.fetchAll(Person.self).map(\.name) == ["Ann"])
        try commit("Bob")
        #expect(try quiet.fetchAll(Person.self).map(\.name) == ["Ann"])
        quiet.reset()
        #expect(try quiet.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["Ann", "Bob"])
    }

    /// "Three-tier": a main context merges only its own updates' commits. Another main
    /// context's commit, through the same root, leaves the object it holds as it was, even
    /// after a read; a fetch that returns the object shows the commit, and refreshes it.
    @Test(arguments: StoreKind.available) @MainActor
    func aThreeTierMainContextDoesNotMergeAnotherContextsCommitsButItsFetchesSeeThem(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let a = try MainContext(stack: store.stack)
        let b = try MainContext(stack: store.stack)
        let id = try create("Ann", in: a)
        let held = try #require(try a.fetch(Person.self, id: id))
        try b.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: id)).age = 30
            try update.commit()
        }
        try await store.stack.flush()
        _ = try a.fetchCount(Pet.self)
        await mainQueueTurn()
        #expect(held.age == 0)
        #expect(try a.fetch(Person.self, %"name" == "Ann")?.age == 30)
        #expect(held.age == 30)
    }

    /// "Delivery": observers run in the order they were added, a context's and the stack's
    /// alike; a stream buffers every commit from the moment it was made, iterated or not.
    @Test @MainActor func observersRunInTheOrderTheyWereAddedAndStreamsBuffer() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        var heard: [String] = []
        let first = world.observeCommit { _ in heard.append("first") }
        let second = store.stack.observeCommit { _ in heard.append("second") }
        let third = world.observeCommit { _ in heard.append("third") }
        var stream = world.commits.makeAsyncIterator()
        let ids = try ["Ann", "Bob"].map { try create($0, in: world) }
        await mainQueueTurn()
        #expect(heard == ["first", "second", "third", "first", "second", "third"])
        #expect(await stream.next()?.inserted == [ids[0]])
        #expect(await stream.next()?.inserted == [ids[1]])
        withExtendedLifetime((first, second, third)) {}
    }

    /// "Iteration ends when the consumer stops": a stream the consumer left with `break`, whose
    /// task was cancelled, or that was dropped without being iterated is forgotten by the
    /// stack — it buffers every commit while registered, so one kept would grow for ever.
    @Test @MainActor func aStreamIsForgottenOnceItsConsumerStops() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let streams = { store.stack.commits.streamCount }
        let before = streams()

        let ann = try create("Ann", in: world)
        Task { @MainActor in _ = try create("Bob", in: world) }
        for await commit in world.commits {
            #expect(streams() == before + 1)
            #expect(commit.inserted != [ann], "a stream buffers commits from the moment it was made")
            break
        }
        #expect(streams() == before, "left with break")

        let consumer = Task { @MainActor in
            for await _ in store.stack.allCommits {}
        }
        for _ in 0..<100 where streams() == before { await mainQueueTurn() }
        #expect(streams() == before + 1)
        consumer.cancel()
        await consumer.value
        #expect(streams() == before, "its task cancelled")

        _ = world.commits
        #expect(streams() == before, "dropped without being iterated")
        _ = try create("Cy", in: world)
        #expect(streams() == before)
    }

    /// "The payload": a commit's origin, target and author are its context's; its token is
    /// known for a commit reported once written (SQLite with history, `.persistentStore`), and
    /// not for one reported when the root took it.
    @Test @MainActor func aCommitCarriesItsContextsTargetAndAuthor() async throws {
        let store = try TestStore(.file, tracksHistory: true)
        let world = try MainContext(stack: store.stack, author: "screen")
        let importer = try Context(stack: store.stack, updateTarget: .persistentStore, author: "importer")
        var seen: [Commit] = []
        let token = store.stack.observeCommit { seen.append($0) }
        _ = try create("Ann", in: world)
        try importer.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Bob"
            try update.commit()
        }
        await mainQueueTurn()
        try #require(seen.count == 2)
        #expect(seen[0].origin == world.contextID && seen[0].target == .mainContext && seen[0].author == "screen")
        #expect(seen[0].token == nil, "reported when the root took it, before it had a token")
        #expect(seen[1].origin == importer.contextID && seen[1].target == .persistentStore && seen[1].author == "importer")
        let newest = try store.stack.lastHistoryToken()
        #expect(seen[1].token != nil && seen[1].token == newest)
        #expect(!seen[0].isRemote && !seen[1].isRemote)
        withExtendedLifetime(token) {}
    }

    /// "Per-consumer": a consumer is reset by the commits of updates started from its updater
    /// only — not by its own updates' commits, not by another context's — and its registration
    /// ends when it is released.
    @Test(arguments: StoreKind.available) @MainActor
    func aConsumerIsResetByItsUpdatersCommitsOnly(kind: StoreKind) async throws {
        let store = try TestStore(kind, rootContext: .none)
        let updater = try Context(stack: store.stack)
        var consumer: MainContext? = try MainContext(stack: store.stack, updateTarget: .persistentStore, resetOnCommitOf: updater)
        let resetters = { store.stack.commits.resetterCount }
        #expect(resetters() == 1)
        func names() throws -> [String] { try #require(consumer).fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) }
        #expect(try names().isEmpty)

        _ = try create("Own", in: try #require(consumer))
        try Context(stack: store.stack).beginUpdateAndWait { update in
            try update.create(Person.self).name = "Other"
            try update.commit()
        }
        await mainQueueTurn()
        #expect(try names().isEmpty, "a commit other than the updater's reset the consumer")

        try updater.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Updater's"
            try update.commit()
        }
        await mainQueueTurn()    // the reset runs on the main actor, after commit() returned
        #expect(try names() == ["Other", "Own", "Updater's"])

        consumer = nil
        #expect(resetters() == 0)
        try updater.beginUpdateAndWait { update in
            try update.create(Person.self).name = "After"
            try update.commit()
        }
    }

    /// "Delivery": observers are told of commits in the order the commits became visible (for
    /// the root's, when queued), also for commits made at the same moment on different
    /// threads. The writer writes them in that order too, so the store's history, one
    /// transaction a commit, lists them as the observer heard them.
    @Test @MainActor func observersHearCommitsFromManyThreadsInTheOrderTheyAreWritten() async throws {
        let store = try TestStore(.file, tracksHistory: true)
        var heard: [ObjectID] = []
        let token = store.stack.observeCommit { heard += $0.inserted }
        let stack = store.stack
        let failures = Locked(0)
        await onThreads(8) { worker in
            for index in 0..<25 {
                do {
                    try Context(stack: stack, updateTarget: .rootContext(autoMerge: false)).beginUpdateAndWait { update in
                        try update.create(Person.self).name = "\(worker)-\(index)"
                        try update.commit()
                    }
                } catch {
                    failures.withLock { $0 += 1 }
                }
            }
        }
        try await store.stack.flush()
        await mainQueueTurn()
        #expect(failures.withLock { $0 } == 0)
        let written = try store.stack.history(after: nil).flatMap { $0.changes.map(\.objectID) }
        #expect(heard.count == 200 && written.count == 200)
        #expect(heard == written)
        withExtendedLifetime(token) {}
    }
}
