@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
@testable import _ContextStackPostgres
@testable import _ContextStackPostgresStore
import Dispatch
import Foundation
import Testing

/// `batchInsert`, `batchUpdate` and `batchDelete`: straight to SQLite, and every context told.
@Suite(.timeLimit(.minutes(5))) struct BatchTests {
    @MainActor static func seed(_ harness: TopologyHarness) throws {
        try harness.update { update in
            let farmer = try update.create(Person.self)
            farmer.name = "Farmer"
            farmer.age = 28
            let knight = try update.create(Person.self)
            knight.name = "Knight"
            knight.age = 18
            knight.friend = farmer
            let monk = try update.create(Person.self)
            monk.name = "Monk"
            monk.age = 12
            for name in ["Rex", "Tom"] {
                let pet = try update.create(Pet.self)
                pet.name = name
                pet.owner = farmer
            }
            let article = try update.create(Article.self)
            article.title = "News"
            let tag = try update.create(Tag.self)
            tag.name = "swift"
            article.tags = [tag]
            try update.commit()
        }
    }

    /// A batch operation is not one of the update's changes: if the update then throws or
    /// rolls back, the batch stays done, and the update's own pending changes go
    /// (Docs/Writing.md, "Where batch operations run").
    @Test(arguments: Setup.all) @MainActor
    func aBatchStaysDoneWhenItsUpdateThrowsOrRollsBack(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        struct Abandoned: Error {}
        #expect(throws: Abandoned.self) {
            try harness.update { update in
                try update.create(Person.self).name = "Pending, thrown away"
                _ = try update.batchInsert(Person.self, [["name": "Batch 1"]])
                throw Abandoned()
            }
        }
        try harness.update { update in
            try update.create(Person.self).name = "Pending, rolled back"
            _ = try update.batchInsert(Person.self, [["name": "Batch 2"]])
            update.rollback()
        }
        #expect(try harness.store.writtenRows("SELECT name FROM \"Person\" ORDER BY name") == [[.text("Batch 1")], [.text("Batch 2")]])
    }

    @Test(arguments: Setup.all) @MainActor
    func batchInsertWritesAtOnceAndIsOneCommit(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let commits = Locked<[Commit]>([])
        let token = harness.observeCommit { commit in commits.withLock { $0.append(commit) } }
        let count = try harness.update { update in
            try update.batchInsert(Person.self, [["name": "Farmer", "age": 28], ["name": "Knight", "location": "Taipei"], [:]])
        }
        #expect(count == 3)
        // In SQLite when it returns, whatever the setup.topology.
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Person\"") == .integer(3))
        try await harness.settle()
        let people = try harness.world.fetchAll(Person.self, orderBy: .ascending("name"))
        #expect(people.map(\.name) == ["", "Farmer", "Knight"])
        #expect(people.map(\.age) == [0, 28, 0])
        #expect(people.map(\.location) == [nil, nil, "Taipei"])
        await mainQueueTurn()
        let seen = commits.withLock { $0 }
        #expect(seen.count == 1)
        #expect(Set(seen.first?.inserted ?? []) == Set(people.map(\.objectID)))
        token.cancel()
    }

    @Test(arguments: Setup.all) @MainActor
    func batchUpdateReachesHeldObjectsAndObservers(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        try Self.seed(harness)
        try await harness.settle()
        let farmer = try #require(try harness.world.fetch(Person.self, %"name" == "Farmer"))
        let commits = Locked<[Commit]>([])
        let token = harness.observeCommit { commit in commits.withLock { $0.append(commit) } }
        let matched = try harness.update { update in
            try update.batchUpdate(Person.self, %"age" >= 18, set: ["location": "Taipei", "age": 30])
        }
        #expect(matched == 2)
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Person\" WHERE location = 'Taipei' AND age = 30") == .integer(2))
        if setup.topology == .twoTierWithoutMerge {
            // A main context that does not merge keeps its view until it resets.
            #expect(try harness.world.fetch(Person.self, %"name" == "Knight")?.location == nil)
            #expect(try harness.world.fetchCount(Person.self, %"location" == "Taipei") == 0)
        }
        try await harness.settle()
        await mainQueueTurn()
        if setup.topology == .threeTier || setup.topology == .threeTierWithoutRoot || setup.topology == .twoTierAutoMerge {
            // The object it already held shows the new values.
            _ = try harness.world.fetchCount(Person.self)
            #expect(farmer.location == "Taipei" && farmer.age == 30)
        }
        #expect(try harness.world.fetchAll(Person.self, %"location" == "Taipei", orderBy: .ascending("name")).map(\.name) == ["Farmer", "Knight"])
        let seen = commits.withLock { $0 }
        #expect(seen.count == 1)
        let commit = try #require(seen.first)
        #expect(commit.updated.count == 2 && commit.inserted.isEmpty && commit.deleted.isEmpty)
        #expect(commit.updated.allSatisfy { commit.changedKeys(of: $0) == ["location", "age"] })
        token.cancel()
    }

    @Test(arguments: Setup.all) @MainActor
    func batchDeleteAppliesDeleteRules(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        try Self.seed(harness)
        try await harness.settle()
        let commits = Locked<[Commit]>([])
        let token = harness.observeCommit { commit in commits.withLock { $0.append(commit) } }
        let farmerID = try #require(try harness.world.fetch(Person.self, %"name" == "Farmer")).objectID
        let knightID = try #require(try harness.world.fetch(Person.self, %"name" == "Knight")).objectID
        let matched = try harness.update { update in try update.batchDelete(Person.self, %"name" == "Farmer") }
        #expect(matched == 1)
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Person\"") == .integer(2))
        // `.cascade` took the pets; `.nullify` cleared the knight's friend.
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Pet\"") == .integer(0))
        #expect(try harness.store.writtenScalar("SELECT friend FROM \"Person\" WHERE name = 'Knight'") == .null)
        try await harness.settle()
        await mainQueueTurn()
        #expect(try harness.world.fetchCount(Pet.self) == 0)
        #expect(try harness.world.fetch(Person.self, id: farmerID) == nil)
        #expect(try harness.world.fetch(Person.self, %"name" == "Knight")?.friend == nil)
        let commit = try #require(commits.withLock { $0 }.first)
        #expect(commit.deleted.count == 3)
        #expect(commit.deleted(Pet.self).count == 2)
        #expect(commit.updated == [knightID])
        #expect(commit.changedKeys(of: knightID) == ["friend"])

        // Many-to-many: the join rows go, and the other side is told.
        let articleID = try #require(try harness.world.fetch(Article.self)).objectID
        _ = try harness.update { update in try update.batchDelete(Tag.self) }
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Z_Article_tags_Tag_articles\"") == .integer(0))
        try await harness.settle()
        await mainQueueTurn()
        #expect(try harness.world.fetch(Article.self)?.tags.isEmpty == true)
        // Writing.md, "Who is told": the surviving article is updated under the relationship's name.
        let tags = try #require(commits.withLock { $0 }.last)
        #expect(tags.deleted(Tag.self).count == 1)
        #expect(tags.updated == [articleID])
        #expect(tags.changedKeys(of: articleID) == ["tags"])
        token.cancel()
    }

    /// Live results follow batch operations as they follow commits.
    @Test(arguments: [Topology.threeTier, .twoTierAutoMerge]) @MainActor
    func liveResultsFollowBatchOperations(topology: Topology) async throws {
        let harness = try TopologyHarness(topology)
        try Self.seed(harness)
        let adults = try FetchedResults(context: harness.world, Person.self, %"age" >= 18, orderBy: .ascending("name"))
        #expect(adults.objects.map(\.name) == ["Farmer", "Knight"])
        _ = try harness.update { update in try update.batchUpdate(Person.self, %"name" == "Monk", set: ["age": 70]) }
        await mainQueueTurn()
        #expect(adults.objects.map(\.name) == ["Farmer", "Knight", "Monk"])
        _ = try harness.update { update in try update.batchInsert(Person.self, [["name": "Abbot", "age": 80], ["name": "Child", "age": 3]]) }
        await mainQueueTurn()
        #expect(adults.objects.map(\.name) == ["Abbot", "Farmer", "Knight", "Monk"])
        _ = try harness.update { update in try update.batchDelete(Person.self, %"age" >= 70) }
        await mainQueueTurn()
        #expect(adults.objects.map(\.name) == ["Farmer", "Knight"])
    }

    @Test @MainActor func denyRefusesAndDeletesNothing() async throws {
        let harness = try TopologyHarness(.threeTier)
        try harness.update { update in
            let full = try update.create(Vault.self)
            full.label = "full"
            try update.create(Coin.self).vault = full
            try update.create(Vault.self).label = "empty"
            try update.commit()
        }
        let error = #expect(throws: SaveError.self) {
            try harness.update { update in try update.batchDelete(Vault.self) }
        }
        #expect(error?.code == .deleteDenied)
        #expect(error?.message.contains("'coins'") == true)
        #expect(try harness.world.fetchCount(Vault.self) == 2)
        // A vault without coins goes.
        #expect(try harness.update { update in try update.batchDelete(Vault.self, %"label" == "empty") } == 1)
        try await harness.stack.flush()
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Vault\"") == .integer(1))
    }

    /// Docs/Writing.md, "batchDelete": under `.deny`, a related object deleted by the same batch
    /// (here by a `.cascade` of the same deleted object) does not count; one that survives
    /// refuses the whole batch.
    @Test(arguments: StoreKind.available)
    func aDeniedObjectTheSameBatchDeletesDoesNotCount(kind: StoreKind) throws {
        let store = try TestStore(kind, types: [Bookcase.self, Volume.self])
        let context = try ContextStack.Context(stack: store.stack)
        let (lending, kept) = try context.beginUpdateAndWait { update -> (ObjectID, ObjectID) in
            // "own" shows one of its own volumes: the cascade deletes it with the bookcase.
            let own = try update.create(Bookcase.self)
            own.label = "own"
            let mine = try update.create(Volume.self)
            (mine.title, mine.bookcase, own.shown) = ("Mine", own, mine)
            // "lending" shows a volume of the bookcase "other", which no batch below deletes.
            let other = try update.create(Bookcase.self)
            other.label = "other"
            let lent = try update.create(Volume.self)
            (lent.title, lent.bookcase) = ("Lent", other)
            let lending = try update.create(Bookcase.self)
            (lending.label, lending.shown) = ("lending", lent)
            try update.commit()
            return (lending.objectID, lent.objectID)
        }
        let error = #expect(throws: SaveError.self) {
            try context.beginUpdateAndWait { update in
                try update.batchDelete(Bookcase.self, %"label" == "own" || %"label" == "lending")
            }
        }
        #expect(error?.code == .deleteDenied)
        #expect(error?.objects == [lending, kept])
        #expect(error?.message.contains("'shown'") == true, "\(String(describing: error))")
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Bookcase\"") == .integer(3), "the refused batch deleted nothing")

        let deleted = try context.beginUpdateAndWait { update in try update.batchDelete(Bookcase.self, %"label" == "own") }
        #expect(deleted == 1)
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT label FROM \"Bookcase\" ORDER BY label") == [[.text("lending")], [.text("other")]])
        #expect(try store.writtenRows("SELECT title FROM \"Volume\"") == [[.text("Lent")]])
    }

    /// Docs/Writing.md, "batchDelete": `.cascade` deletes the related objects too, through a
    /// to-one as through a to-many, as `delete(_:)` does in a context.
    @Test(arguments: StoreKind.available)
    func batchDeleteCascadesThroughAToOne(kind: StoreKind) throws {
        let store = try TestStore(kind, types: [Parcel.self, Shipment.self])
        let context = try ContextStack.Context(stack: store.stack)
        try context.beginUpdateAndWait { update in
            let shipment = try update.create(Shipment.self)
            for label in ["a", "b"] {
                let parcel = try update.create(Parcel.self)
                (parcel.label, parcel.shipment) = (label, shipment)
            }
            try update.create(Shipment.self).number = 2
            try update.commit()
        }
        let deleted = try context.beginUpdateAndWait { update in try update.batchDelete(Parcel.self, %"label" == "a") }
        #expect(deleted == 1)
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT number FROM \"Shipment\"") == [[.integer(2)]], "the cascade kept parcel a's shipment")
        // The shipment's own rule (`.nullify`) cleared parcel b's reference to it.
        #expect(try store.writtenRows("SELECT label, shipment FROM \"Parcel\"") == [[.text("b"), .null]])
    }

    /// Writing.md, "Serial updates": under `.serial` a batch runs inside the update that holds
    /// the turn — it does not wait for a turn of its own — and an update begun meanwhile starts
    /// only after that update ends.
    @Test(.timeLimit(.minutes(1)), arguments: Setup.all) @MainActor func aBatchRunsInsideTheSerialUpdateThatHoldsTheTurn(setup: Setup) async throws {
        let harness = try TopologyHarness(setup, order: .serial)
        try Self.seed(harness)
        let (events, event) = AsyncStream.makeStream(of: String.self)
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        harness.beginUpdate { update in
            holding.signal()
            release.wait()
            event.yield("batch of \(try update.batchUpdate(Person.self, set: ["age": 50]))")
        }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async { holding.wait(); done.resume() }
        }
        harness.beginUpdate { update in
            event.yield("then")
        }
        release.signal()
        var seen = events.makeAsyncIterator()
        let first = await seen.next()
        let second = await seen.next()
        #expect([first, second] == ["batch of 3", "then"])
    }

    @Test @MainActor func theUpdateItselfStaysCoherent() async throws {
        let harness = try TopologyHarness(.threeTier)
        try Self.seed(harness)
        try harness.update { update in
            let farmer = try #require(try update.fetch(Person.self, %"name" == "Farmer"))
            let knight = try #require(try update.fetch(Person.self, %"name" == "Knight"))
            let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
            knight.name = "Sir Knight"
            knight.age = 19
            #expect(try update.batchUpdate(Person.self, set: ["age": 40, "location": "Hsinchu"]) == 3)
            #expect(farmer.age == 40 && farmer.location == "Hsinchu")
            // Its own change wins for the key it changed; the rest comes from the batch.
            #expect(knight.age == 19 && knight.location == "Hsinchu")
            // It acts on committed rows, not on the update's uncommitted name; the deleted
            // object's uncommitted change is dropped (Writing.md, "The update itself").
            monk.age = 99
            #expect(try update.batchDelete(Person.self, %"name" == "Monk") == 1)
            #expect(monk.isDeleted)
            #expect(!monk.hasChanges)
            #expect(try update.fetch(Person.self, %"name" == "Monk") == nil)
            try update.commit()
        }
        try await harness.stack.flush()
        let rows = try harness.store.writtenRows("SELECT name, age, location FROM \"Person\" ORDER BY name")
        #expect(rows == [["Farmer", 40, "Hsinchu"], ["Sir Knight", 19, "Hsinchu"]])
    }

    /// A batch delete applies delete rules to stored rows, not to the update's pending
    /// changes. A reference the update made before it to an object it deleted makes `commit()`
    /// throw `.relatesToDeletedObject`, with the changes still pending and nothing saved (the
    /// writer used to fail the whole commit in the background, the unrelated person with it);
    /// a many-to-many pair the update added goes with its deleted end, as the stored ones did,
    /// and the rest of the commit is saved (Docs/Writing.md, "Where batch operations run").
    @Test(arguments: StoreKind.available) @MainActor
    func referencesTheUpdateMadeToWhatItsBatchDeletedAreRefusedOrGoWithIt(kind: StoreKind) async throws {
        let harness = try TopologyHarness(.threeTier, kind: kind)
        try Self.seed(harness)
        let refused = try harness.update { update -> SaveError? in
            let farmer = try #require(try update.fetch(Person.self, %"name" == "Farmer"))
            let rex = try update.create(Pet.self)
            (rex.name, rex.owner) = ("Rex II", farmer)
            try update.create(Person.self).name = "Unrelated"
            #expect(try update.batchDelete(Person.self, %"name" == "Farmer") == 1)
            #expect(rex.owner == nil, "the reference reads as gone")
            let error = #expect(throws: SaveError.self) { try update.commit() }
            #expect(rex.isInserted && rex.hasChanges, "the changes are still pending")
            update.rollback()
            return error
        }
        #expect(refused?.code == .relatesToDeletedObject, "\(String(describing: refused))")
        #expect(refused?.message.contains("batch delete") == true, "\(String(describing: refused))")
        try await harness.stack.flush()
        #expect(try harness.store.writtenRows("SELECT name FROM \"Person\" ORDER BY name") == [["Knight"], ["Monk"]], "the batch stays done; nothing of the commit is saved")
        #expect(try harness.store.writtenRows("SELECT name FROM \"Pet\"") == [], "the batch's cascade took the stored pets")

        try harness.update { update in
            let article = try update.create(Article.self)
            article.title = "Later"
            let tag = try update.create(Tag.self)
            tag.name = "kept"
            try update.commit()
        }
        try harness.update { update in
            let later = try #require(try update.fetch(Article.self, %"title" == "Later"))
            let kept = try #require(try update.fetch(Tag.self, %"name" == "kept"))
            let swift = try #require(try update.fetch(Tag.self, %"name" == "swift"))
            later.tags = [kept, swift]
            try update.create(Person.self).name = "Saved"
            #expect(try update.batchDelete(Tag.self, %"name" == "swift") == 1)
            try update.commit()
        }
        try await harness.stack.flush()
        #expect(try harness.store.writtenRows("SELECT name FROM \"Person\" WHERE name = 'Saved'") == [["Saved"]])
        let tags = try harness.world.fetch(Article.self, %"title" == "Later")?.tags.map(\.name)
        #expect(tags == ["kept"])
    }

    /// A commit handed over while a batch update is queued and not yet written is checked for
    /// uniqueness once the batch is: the value the batch gives one person is refused to
    /// another by `commit()` itself (Docs/Writing.md, "the error always reaches the code that
    /// committed"). Checked without the batch, the commit went through and the writer failed
    /// it in the background. Here the writer is held, so the batch waits to be written; the
    /// commit then waits for it, and the writer is let go once it does (without the wait, the
    /// commit returns at once, and the writer is let go then).
    @Test(.timeLimit(.minutes(1)), arguments: StoreKind.available.filter { $0 != .memory })
    func aCommitIsCheckedForUniquenessAfterTheBatchQueuedBeforeIt(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let (batch, commit) = try await Self.commitBehindABatch(on: store, emailOfA: nil) { update in
            try update.batchUpdate(Person.self, %"name" == "A", set: ["email": "x@example.com"])
        }
        #expect(try batch.get() == 1)
        guard case .failure(let failure) = commit else {
            Issue.record("commit() returned: the commit was checked without the batch")
            return
        }
        #expect((failure as? SaveError)?.code == .uniquenessViolated, "\(failure)")
        try await store.stack.flush()
        #expect(try store.writtenRows("SELECT name FROM \"Person\" WHERE email = 'x@example.com'") == [["A"]])
    }

    /// The same for a batch delete, which frees a value: a commit that sets the email the
    /// queued batch deletes waits for the batch and is saved, where checked without it, it
    /// would meet the stored row and fail with `.uniquenessViolated`.
    @Test(.timeLimit(.minutes(1)), arguments: StoreKind.available.filter { $0 != .memory })
    func aCommitTakesAUniqueValueTheBatchDeleteQueuedBeforeItFrees(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let (batch, commit) = try await Self.commitBehindABatch(on: store, emailOfA: "x@example.com") { update in
            try update.batchDelete(Person.self, %"email" == "x@example.com")
        }
        #expect(try batch.get() == 1)
        #expect(throws: Never.self) { try commit.get() }
        try await store.stack.flush()
        #expect(try store.writtenRows("SELECT name FROM \"Person\" WHERE email = 'x@example.com'") == [["B"]])
    }

    /// Stores people A (with `emailOfA`) and B, queues `batch` behind a writer held from
    /// outside (by a lock on A's row), then commits B's email `x@example.com` from a context
    /// that does not wait to be written, and lets the writer go once that commit waits for it,
    /// or returned. Returns what the batch and the commit gave. Both run on threads of their
    /// own: both wait for the held writer, which must not hold threads of the cooperative pool.
    static func commitBehindABatch(on store: TestStore, emailOfA: String?,
                                   _ batch: @escaping @Sendable (Update) throws -> Int) async throws -> (batch: Result<Int, any Error>, commit: Result<Void, any Error>) {
        let context = try ContextStack.Context(stack: store.stack)
        let (a, b) = try context.beginUpdateAndWait { update in
            let a = try update.create(Person.self)
            (a.name, a.email) = ("A", emailOfA)
            let b = try update.create(Person.self)
            b.name = "B"
            try update.commit()
            return (a.objectID, b.objectID)
        }
        try await store.stack.flush()
        let release = try store.holdTheWriterFromOutside(locking: a)
        let batched = Locked<Result<Int, any Error>?>(nil)
        Thread.detachNewThread {
            let result = Result { try context.beginUpdateAndWait(batch) }
            batched.withLock { $0 = result }
        }
        for _ in 0..<2000 where !store.hasUnwrittenBatch { try await Task.sleep(for: .milliseconds(5)) }
        try #require(store.hasUnwrittenBatch, "the batch is queued behind the held writer: \(String(describing: batched.withLock { $0 }))")
        let waitingBefore = store.writerWaiters    // the batch's caller writes it: it does not wait
        let committed = Locked<Result<Void, any Error>?>(nil)
        // Not behind the batch's update, and a commit that does not wait to be written.
        let committer = try ContextStack.Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        Thread.detachNewThread {
            let result = Result {
                try committer.beginUpdateAndWait { update in
                    try #require(try update.fetch(Person.self, id: b)).email = "x@example.com"
                    try update.commit()
                }
            }
            committed.withLock { $0 = result }
        }
        // Until the commit waits for the writer, or returned; a bound, not a measure.
        for _ in 0..<2000 where committed.withLock({ $0 == nil }) && store.writerWaiters <= waitingBefore { try await Task.sleep(for: .milliseconds(5)) }
        try release()
        for _ in 0..<6000 where committed.withLock({ $0 == nil }) || batched.withLock({ $0 == nil }) {
            try await Task.sleep(for: .milliseconds(5))
        }
        return (try #require(batched.withLock { $0 }), try #require(committed.withLock { $0 }))
    }

    /// Only references the update set are refused: a stored reference a `.noAction` rule
    /// leaves pointing at what the batch deleted goes out unchanged with an object the update
    /// changed otherwise, as it would without the batch.
    @Test(arguments: StoreKind.available)
    func aStoredReferenceANoActionRuleLeftDoesNotStopTheCommit(kind: StoreKind) throws {
        let store = try TestStore(kind, types: [Kennel.self, Dog.self])
        let context = try ContextStack.Context(stack: store.stack)
        try context.beginUpdateAndWait { update in
            let kennel = try update.create(Kennel.self)
            kennel.name = "North"
            let rex = try update.create(Dog.self)
            (rex.name, rex.kennel) = ("Rex", kennel)
            try update.commit()
        }
        try context.beginUpdateAndWait { update in
            try #require(try update.fetch(Dog.self)).name = "Rex II"
            #expect(try update.batchDelete(Kennel.self) == 1)
            try update.commit()
        }
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT name FROM \"Dog\"") == [["Rex II"]])
    }

    @Test @MainActor func badKeysAndValuesThrowBeforeAnythingIsWritten() throws {
        let harness = try TopologyHarness(.threeTier)
        try Self.seed(harness)
        let cases: [(String, @Sendable (Update) throws -> Void, QueryError.Code)] = [
            ("unknown key", { try $0.batchInsert(Person.self, [["name": "a"], ["nope": 1]]) }, .unknownKey),
            ("text into Int", { try $0.batchUpdate(Person.self, set: ["age": "old"]) }, .typeMismatch),
            ("nil into String", { try $0.batchUpdate(Person.self, set: ["name": nil]) }, .typeMismatch),
            ("fraction into Int", { try $0.batchInsert(Person.self, [["age": 1.5]]) }, .typeMismatch),
            ("relationship", { try $0.batchUpdate(Person.self, set: ["friend": 1]) }, .unsupported),
            ("NaN into Int", { try $0.batchUpdate(Person.self, set: ["age": .double(.nan)]) }, .typeMismatch),
            ("Int16 out of range", { try $0.batchInsert(Sample.self, [["int16": 40_000]]) }, .typeMismatch),
            ("Int16 below its range", { try $0.batchInsert(Sample.self, [["int16": -32_769]]) }, .typeMismatch),
            ("NaN into a non-optional Double", { try $0.batchInsert(Sample.self, [["double": .double(.nan)]]) }, .typeMismatch),
            ("bad predicate", { try $0.batchDelete(Person.self, %"nope" == 1) }, .unknownKey),
        ]
        for (label, body, code) in cases {
            let error = #expect(throws: QueryError.self, "\(label)") { try harness.update(body) }
            #expect(error?.code == code, "\(label)")
        }
        #expect(try harness.world.fetchCount(Person.self) == 3)
        #expect(try harness.world.fetchCount(Person.self, %"age" == 0) == 0)
        #expect(try harness.world.fetchCount(Sample.self) == 0)
        // The ends of an `Int16`'s range are in it.
        #expect(try harness.update { try $0.batchInsert(Sample.self, [["int16": 32_767], ["int16": -32_768]]) } == 2)
    }

    /// Writing.md: a batch stores each value as an object of the entity stores it, so that a
    /// fetch, a query or a uniqueness constraint sees one value one way on every store: a
    /// `Float` to a `Float`'s precision, a NaN as nil, a `Decimal` in one form ("12.50" is
    /// 12.5, and a number is a decimal too), a URL checked. (They were stored as given: the
    /// batch's 0.1 was not the object's `Float(0.1)`, and "12.50" not 12.5.)
    @Test(arguments: StoreKind.available) @MainActor
    func batchValuesAreStoredAsAnObjectStoresThem(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let sample = try update.create(Sample.self)
            (sample.float, sample.decimal, sample.optionalDouble) = (0.1, Decimal(string: "12.5")!, 1)
            try update.commit()
            #expect(try update.batchInsert(Sample.self, [
                ["float": 0.1, "decimal": "12.50", "optionalDouble": .double(.nan)],
                ["float": .integer(1), "decimal": 2.5, "optionalURL": "https://example.com/a"],
            ]) == 2)
            #expect(try update.batchUpdate(Sample.self, %"decimal" == Decimal(2.5), set: ["decimal": "2.50"]) == 1)
        }
        try store.stack.flushAndWait()
        #expect(try world.fetchCount(Sample.self, %"float" == Float(0.1)) == 2)
        #expect(try world.fetchCount(Sample.self, %"decimal" == Decimal(string: "12.5")!) == 2)
        #expect(try world.fetchCount(Sample.self, %"decimal" == Decimal(string: "2.5")!) == 1)
        #expect(try world.fetchCount(Sample.self, %"optionalDouble" == nil) == 2)
        #expect(try world.query(Sample.self, .select("float"), options: .distinct).count == 2, "0.1 and 1")
        // An enum takes its cases' raw values: another would read back as the default.
        // (They were stored, and `.calm` read where "furious" was written.)
        // A URL's text is checked as `URL(string:)` reads it.
        for (key, value) in [("mood", Value.text("furious")), ("level", .integer(3)), ("optionalMood", "Calm"), ("optionalURL", "http://[::1")] {
            let error = #expect(throws: QueryError.self, "\(key)") {
                try world.beginUpdateAndWait { update in _ = try update.batchUpdate(Sample.self, set: [key: value]) }
            }
            #expect(error?.code == .typeMismatch && error?.key == key)
        }
        let changed = try world.beginUpdateAndWait { update in
            try update.batchUpdate(Sample.self, %"decimal" == Decimal(2.5), set: ["mood": "grumpy", "level": 2, "optionalMood": nil])
        }
        #expect(changed == 1)
        try store.stack.flushAndWait()
        #expect(try world.fetchCount(Sample.self, %"mood" == Mood.grumpy && %"level" == Level.high) == 1)
        // Text that only begins with a number is no number: Foundation alone reads "12,50",
        // "12abc" and " 7" as 12, 12 and 7.
        for text in ["twelve", "12,50", "12abc", " 7", "7 ", "", ".", "1e", "1.2.3"] {
            let error = #expect(throws: QueryError.self, "\(text)") {
                try world.beginUpdateAndWait { update in _ = try update.batchInsert(Sample.self, [["decimal": .text(text)]]) }
            }
            #expect(error?.code == .typeMismatch)
        }
        try world.beginUpdateAndWait { update in
            let inserted = try update.batchInsert(Sample.self, [["decimal": "-1e3"], ["decimal": ".5"], ["decimal": "+7."]])
            #expect(inserted == 3)
        }
        try store.stack.flushAndWait()
        #expect(try world.fetchCount(Sample.self, %"decimal" == Decimal(-1000)) == 1)
        #expect(try world.fetchCount(Sample.self, %"decimal" == Decimal(string: "0.5")!) == 1)
        #expect(try world.fetchCount(Sample.self, %"decimal" == Decimal(7)) == 1)
        #expect(try world.fetchCount(Sample.self) == 6, "nothing of the refused batches was stored")
    }

    /// Docs/Writing.md, "Batch operations": a batch that would give two rows one unique value —
    /// within the batch, or against a stored row — throws `.uniquenessViolated` and stores
    /// nothing, on every store.
    @Test(arguments: StoreKind.available) @MainActor func uniquenessHoldsForBatchesToo(kind: StoreKind) async throws {
        let harness = try TopologyHarness(Setup(topology: .threeTier, kind: kind))
        try Self.seed(harness)
        try harness.update { update in
            try update.create(Person.self).email = "stored@example.com"
            try update.commit()
        }
        let clash = #expect(throws: SaveError.self) {
            try harness.update { update in
                try update.batchInsert(Person.self, [["email": "new@example.com"], ["email": "stored@example.com"]])
            }
        }
        #expect(clash?.code == .uniquenessViolated)
        let insert = #expect(throws: SaveError.self) {
            try harness.update { update in
                try update.batchInsert(Person.self, [["email": "a@example.com"], ["email": "b@example.com"], ["email": "a@example.com"]])
            }
        }
        #expect(insert?.code == .uniquenessViolated)
        let update = #expect(throws: SaveError.self) {
            try harness.update { update in try update.batchUpdate(Person.self, set: ["email": "same@example.com"]) }
        }
        #expect(update?.code == .uniquenessViolated)
        #expect(update?.keys == ["email"])
        try await harness.stack.flush()
        #expect(try harness.store.writtenRows("SELECT email FROM \"Person\" WHERE email IS NOT NULL") == [[.text("stored@example.com")]])
        #expect(try harness.world.fetchCount(Person.self) == 4)
    }

    /// A failing batch shares the writer's transaction with commits queued around it; only the
    /// batch fails.
    @Test @MainActor func aFailingBatchFailsAloneInAGroupCommit() async throws {
        let harness = try TopologyHarness(.threeTier)
        let recorder = ErrorRecorder()
        harness.stack.onError = { recorder.record($0) }
        try harness.update { update in
            try update.create(Person.self).email = "taken@example.com"
            try update.create(Person.self).name = "No address"
            try update.commit()
        }
        let failures = Locked(0)
        let world = harness.world
        await onThreads(4) { worker in
            for index in 0..<10 {
                do {
                    try world.beginUpdateAndWait { update in
                        if index % 5 == 4 {
                            _ = try update.batchUpdate(Person.self, %"email" == nil, set: ["email": "taken@example.com"])
                        } else {
                            try update.create(Pet.self).name = "pet\(worker)-\(index)"
                            try update.commit()
                        }
                    }
                } catch let error as SaveError where error.code == .uniquenessViolated {
                    failures.withLock { $0 += 1 }
                } catch {
                    Issue.record("unexpected \(error)")
                }
            }
        }
        try await harness.stack.flush()
        #expect(failures.withLock { $0 } == 8)
        #expect(recorder.all.isEmpty)
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Pet\"") == .integer(32))
    }
}

/// A `.deny` relationship beside a `.cascade` one to the same entity.
@Entity final class Bookcase: ManagedObject {
    var label: String = ""
    @Relationship(deleteRule: .cascade, inverse: \Volume.bookcase) var volumes: Set<Volume>
    @Relationship(deleteRule: .deny, inverse: \Volume.shownIn) var shown: Volume?
}

@Entity final class Volume: ManagedObject {
    var title: String = ""
    @Relationship var bookcase: Bookcase?
    @Relationship var shownIn: Bookcase?
}
