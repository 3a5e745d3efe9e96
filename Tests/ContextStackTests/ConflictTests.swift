@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// Two updates read the same object; the second commits after the first. `policy` decides.
@Suite struct ConflictTests {
    /// A stored sample, and an update context B that read it and holds it (unchanged objects
    /// are held weakly by their context), in a main context of `policy`.
    struct Reader {
        let store: TestStore
        let world: MainContext
        let id: ObjectID
        let b: UpdateContext
        let held: Sample?
        var parts: (TestStore, MainContext, ObjectID, UpdateContext, Sample?) { (store, world, id, b, held) }
    }

    @MainActor static func aReader(_ policy: MergePolicy) throws -> Reader {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack, mergePolicy: policy)
        let id = try world.beginUpdateAndWait { update in
            let sample = try update.create(Sample.self)
            try update.commit()
            return sample.objectID
        }
        let b = world.beginUpdateContext()
        let held = try b.performAndWait { update in try update.fetch(Sample.self, id: id) }
        return Reader(store: store, world: world, id: id, b: b, held: held)
    }

    /// `aReader`, after another update set the sample's `int` to 1: B's object still holds 0.
    @MainActor static func aReaderOfAnOlderValue(_ policy: MergePolicy) throws -> Reader {
        let reader = try aReader(policy)
        try reader.world.beginUpdateAndWait { update in
            try #require(try update.fetch(Sample.self, id: reader.id)).int = 1
            try update.commit()
        }
        return reader
    }

    /// Returns the sample as stored after: A sets int = 1 (and string = "A" when `alsoString`),
    /// committed first; B, which read the object before A committed, sets int = 2 and
    /// double = 2 and commits second under `policy`.
    @MainActor func race(_ policy: MergePolicy, bothChangeInt: Bool = true) throws -> (Sample?, (any Error)?) {
        let (store, world, id, b, held) = try Self.aReader(policy).parts
        defer { withExtendedLifetime(store) {} }
        try world.beginUpdateAndWait { update in
            let sample = try #require(try update.fetch(Sample.self, id: id))
            if bothChangeInt { sample.int = 1 }
            sample.string = "A"
            try update.commit()
        }
        var failure: (any Error)?
        do {
            try b.performAndWait { update in
                let sample = try #require(held)
                sample.int = 2
                sample.double = 2
                try update.create(Pet.self).name = "B's"
                try update.commit()
            }
        } catch {
            failure = error
        }
        return (try world.fetch(Sample.self, id: id), failure)
    }

    /// Docs/Topologies.md, "Empty commits are not reported": a commit whose changes the merge
    /// policy dropped entirely (`.rollback`; `.storeTrump` when it changed only keys another
    /// commit changed) tells no observer, and, from a per-consumer updater, resets no consumer.
    @Test(arguments: StoreKind.available, [MergePolicy.rollback, .storeTrump]) @MainActor
    func aCommitThePolicyDroppedEntirelyTellsNobody(kind: StoreKind, policy: MergePolicy) async throws {
        let harness = try TopologyHarness(.perConsumer, kind: kind, policy: policy)
        let updater = try #require(harness.updater)
        let id = try await harness.write { update in
            let sample = try update.create(Sample.self)
            try update.commit()
            return sample.objectID
        }
        let shown = try #require(try harness.world.fetch(Sample.self, id: id))
        let slow = updater.beginUpdateContext()
        let held = try slow.performAndWait { update in try update.fetch(Sample.self, id: id) }
        // Another context's commit changes the key the slow update is about to change.
        let other = try Context(stack: harness.stack, updateTarget: .persistentStore)
        try other.beginUpdateAndWait { update in
            try #require(try update.fetch(Sample.self, id: id)).int = 1
            try update.commit()
        }
        await mainQueueTurn()    // its own report delivered first
        var told: [Commit] = []
        let token = harness.stack.observeCommit { told.append($0) }
        try slow.performAndWait { update in
            try #require(held).int = 2
            try update.commit()
        }
        try await harness.stack.flush()
        await mainQueueTurn()
        #expect(told.isEmpty, "a commit with nothing left was reported: \(told)")
        #expect(try harness.world.fetch(Sample.self, id: id) === shown && shown.int == 0,
                "the consumer was reset: it would show the other context's value")
        #expect(try harness.store.writtenScalar("SELECT int FROM \"Sample\"") == .integer(1))
        withExtendedLifetime(token) {}
    }

    /// The default is `.objectTrump`, not Core Data's `NSErrorMergePolicy` (GettingStarted.md,
    /// "Coming from Core Data"): a conflict merges silently unless `.error` is asked for.
    @Test @MainActor func theDefaultMergePolicyIsObjectTrump() throws {
        let store = try TestStore(.memory)
        #expect(try MainContext(stack: store.stack).mergePolicy == .objectTrump)
        #expect(try ContextStack.Context(stack: store.stack).mergePolicy == .objectTrump)
    }

    @Test @MainActor func objectTrumpKeepsBothSidesChangesAndOursWinsTheSameKey() throws {
        let (sample, error) = try race(.objectTrump)
        #expect(error == nil)
        #expect(sample?.int == 2)
        #expect(sample?.string == "A")
        #expect(sample?.double == 2)
    }

    @Test @MainActor func storeTrumpKeepsTheStoredValueForKeysChangedInTheStore() throws {
        let (sample, error) = try race(.storeTrump)
        #expect(error == nil)
        #expect(sample?.int == 1)
        #expect(sample?.string == "A")
        #expect(sample?.double == 2)
    }

    /// Docs/Concurrency.md, "After the commit": B's objects keep the values B had, also the
    /// one `.storeTrump` dropped for the stored value.
    @Test @MainActor func storeTrumpLeavesTheCommittingObjectWithItsOwnValue() throws {
        let (store, world, id, b, held) = try Self.aReaderOfAnOlderValue(.storeTrump).parts
        defer { withExtendedLifetime(store) {} }
        try b.performAndWait { update in
            let sample = try #require(held)
            sample.int = 2
            sample.double = 2
            try update.commit()
            #expect(sample.int == 2 && sample.double == 2, "B's object keeps B's values")
        }
        let stored = try #require(try world.fetch(Sample.self, id: id))
        #expect(stored.int == 1 && stored.double == 2)
    }

    /// Docs/Concurrency.md, "Merge policies": under `.error`, deleting an object changed in the
    /// store since, and adding or removing many-to-many members of one, are not compared.
    @Test(arguments: StoreKind.available) @MainActor
    func underErrorDeletesAndManyToManyPairsDoNotConflict(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack, mergePolicy: .error)
        let (article, sample) = try world.beginUpdateAndWait { update in
            let article = try update.create(Article.self)
            article.title = "first"
            let old = try update.create(Tag.self)
            old.name = "old"
            article.tags = [old]
            let sample = try update.create(Sample.self)
            try update.commit()
            return (article.objectID, sample.objectID)
        }
        let b = world.beginUpdateContext()
        let (heldArticle, heldSample) = try b.performAndWait { update in
            let held = try update.fetch(Article.self, id: article)
            #expect(held?.tags.map(\.name) == ["old"], "B reads the tags before the other update")
            return (held, try update.fetch(Sample.self, id: sample))
        }
        // Another update changes both objects' attributes, and the article's tags.
        try world.beginUpdateAndWait { update in
            let stored = try #require(try update.fetch(Article.self, id: article))
            stored.title = "second"
            let theirs = try update.create(Tag.self)
            theirs.name = "theirs"
            stored.tags.insert(theirs)
            try #require(try update.fetch(Sample.self, id: sample)).int = 1
            try update.commit()
        }
        try b.performAndWait { update in
            let held = try #require(heldArticle)
            let new = try update.create(Tag.self)
            new.name = "new"
            held.tags = [new]
            try update.delete(try #require(heldSample))
            try update.commit()
        }
        try store.stack.flushAndWait()
        let stored = try #require(try world.fetch(Article.self, id: article))
        #expect(stored.title == "second")
        // B's pairs (old removed, new added) and theirs (theirs added) are all kept.
        #expect(stored.tags.map(\.name).sorted() == ["new", "theirs"])
        #expect(try world.fetch(Sample.self, id: sample) == nil)
    }

    @Test @MainActor func overwriteSavesTheWholeObjectAsWeHaveIt() throws {
        let (sample, error) = try race(.overwrite)
        #expect(error == nil)
        #expect(sample?.int == 2)
        #expect(sample?.string == "default")  // A's change is overwritten
        #expect(sample?.double == 2)
    }

    @Test @MainActor func rollbackDropsOurChangesToTheConflictingObject() throws {
        let (sample, error) = try race(.rollback)
        #expect(error == nil)
        #expect(sample?.int == 1)
        #expect(sample?.string == "A")
        #expect(sample?.double == 0)
        // The rest of the commit is saved.
        #expect(try sample.map { try $0.context.fetchCount(Pet.self, nil) } == 1)
    }

    /// Docs/Concurrency.md's promises about the policies beyond the five outcomes: the default,
    /// a change changed back, an object deleted since it was read, the changes left pending by
    /// a `MergeConflictError`, and the values a committing update's objects keep.
    @Test @MainActor func objectTrumpIsTheDefault() throws {
        let store = try TestStore(.memory)
        #expect(try MainContext(stack: store.stack).mergePolicy == .objectTrump)
        #expect(try ContextStack.Context(stack: store.stack).mergePolicy == .objectTrump)
    }

    @Test @MainActor func aValueChangedAndChangedBackIsNoConflict() throws {
        let (store, world, id, b, held) = try Self.aReader(.error).parts
        defer { withExtendedLifetime(store) {} }
        for value in ["A", "default"] {
            try world.beginUpdateAndWait { update in
                try #require(try update.fetch(Sample.self, id: id)).string = value
                try update.commit()
            }
        }
        try b.performAndWait { update in
            try #require(held).int = 2
            try update.commit()
        }
        #expect(try world.fetch(Sample.self, id: id)?.int == 2)
    }

    @Test(arguments: [MergePolicy.objectTrump, .storeTrump, .overwrite, .rollback, .error]) @MainActor
    func changesToAnObjectDeletedSinceAreDroppedOrReported(policy: MergePolicy) throws {
        let (store, world, id, b, held) = try Self.aReader(policy).parts
        defer { withExtendedLifetime(store) {} }
        try world.beginUpdateAndWait { update in
            try update.delete(#require(try update.fetch(Sample.self, id: id)))
            try update.commit()
        }
        var failure: (any Error)?
        do {
            try b.performAndWait { update in
                try #require(held).int = 2
                try update.create(Pet.self).name = "B's"
                try update.commit()
            }
        } catch {
            failure = error
        }
        #expect(try world.fetch(Sample.self, id: id) == nil, "the deletion wins")
        if policy == .error {
            let conflict = try #require(failure as? MergeConflictError)
            #expect(conflict.conflicts.map(\.key) == ["<deleted>"])
            #expect(try world.fetchCount(Pet.self) == 0)
        } else {
            #expect(failure == nil, "\(String(describing: failure))")
            #expect(try world.fetchCount(Pet.self) == 1)
        }
    }

    @Test @MainActor func aConflictLeavesTheChangesPendingAndOurObjectsKeepOurValues() throws {
        let (store, world, id, b, held) = try Self.aReaderOfAnOlderValue(.error).parts
        defer { withExtendedLifetime(store) {} }
        try b.performAndWait { update in
            let sample = try #require(held)
            sample.int = 2
            #expect(throws: MergeConflictError.self) { try update.commit() }
            // Still pending: the update reads its own value, and the store's is untouched.
            #expect(sample.int == 2 && sample.hasChanges)
            update.rollback()
        }
        #expect(try world.fetch(Sample.self, id: id)?.int == 1)

        // Under .objectTrump, a committing update's objects keep its values, not the store's.
        let c = try MainContext(stack: store.stack).beginUpdateContext()
        let mine = try c.performAndWait { update in try update.fetch(Sample.self, id: id) }
        try world.beginUpdateAndWait { update in
            try #require(try update.fetch(Sample.self, id: id)).string = "A"
            try update.commit()
        }
        try c.performAndWait { update in
            let sample = try #require(mine)
            sample.int = 3
            try update.commit()
            #expect(sample.string == "default", "not A's change")
        }
        let stored = try #require(try world.fetch(Sample.self, id: id))
        #expect(stored.int == 3 && stored.string == "A")
    }

    @Test @MainActor func errorThrowsWithSnapshotStoredAndOursAndSavesNothing() throws {
        let store = try TestStore(.memory)
        _ = store
        let (sample, error) = try race(.error)
        let conflict = try #require(error as? MergeConflictError)
        #expect(conflict.objectIDs == [sample!.objectID])
        let int = try #require(conflict.conflicts.first { $0.key == "int" })
        #expect(int.snapshot == .integer(0) && int.stored == .integer(1) && int.ours == .integer(2))
        #expect(conflict.conflicts.contains { $0.key == "string" && $0.stored == .text("A") && $0.ours == .text("default") })
        #expect(sample?.int == 1 && sample?.double == 0)
        #expect(try sample.map { try $0.context.fetchCount(Pet.self, nil) } == 0)
    }

    @Test @MainActor func noConflictWhenTheStoreDidNotChange() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack, mergePolicy: .error)
        try world.beginUpdateAndWait { update in
            try update.create(Sample.self)
            try update.commit()
        }
        try world.beginUpdateAndWait { update in
            try #require(try update.fetch(Sample.self)).int = 5
            try update.commit()
        }
        #expect(try world.fetch(Sample.self)?.int == 5)
    }

    /// Docs/Concurrency.md, "Merge policies": the check compares with what is stored and with
    /// the commits the root has accepted but not written yet. A's commit waits in the writer's
    /// queue; B, which read the monk before it, conflicts with A's age although no row holds
    /// it yet, and once the queue resumes A's age is what is written.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func theCheckSeesCommitsTheRootHasNotWrittenYet(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack, mergePolicy: .error)
        let id = try world.beginUpdateAndWait(Fixtures.monkAgedOne)
        try await store.stack.flush()
        let b = world.beginUpdateContext()
        let held = try b.performAndWait { update in try update.fetch(Person.self, id: id) }
        try store.withWriterQueueSuspended {
            try world.beginUpdateAndWait { update in
                try #require(try update.fetch(Person.self, id: id)).age = 2
                try update.commit()
            }
            #expect(try store.writtenRows("SELECT age FROM \"Person\"") == [[.integer(1)]], "A's commit waits in the queue")
            let conflict = #expect(throws: MergeConflictError.self) {
                try b.performAndWait { update in
                    try #require(held).age = 3
                    try update.commit()
                }
            }
            #expect(conflict?.conflicts.contains { $0.key == "age" && $0.snapshot == .integer(1) && $0.stored == .integer(2) && $0.ours == .integer(3) } == true,
                    "\(String(describing: conflict))")
        }
        try await store.stack.flush()
        #expect(try store.writtenRows("SELECT age FROM \"Person\"") == [[.integer(2)]])
    }

    /// Another process changes the monk after this process's `commit()` checked him and before
    /// its writer writes the commit (handed to the root, it waits in the queue). The writer
    /// applies the policy again to the row as stored then, as on PostgreSQL: `.error` fails
    /// the commit, `.storeTrump` keeps the other process's age and saves this commit's name,
    /// `.rollback` drops this commit's changes to the monk, `.overwrite` saves them all, and
    /// the main context that was shown the commit is told what was kept.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }, [MergePolicy.error, .storeTrump, .rollback, .overwrite]) @MainActor
    func anotherProcessChangeBetweenTheCheckAndTheWriteMeetsThePolicy(kind: StoreKind, policy: MergePolicy) async throws {
        let store = try TestStore(kind)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let world = try MainContext(stack: store.stack, mergePolicy: policy)
        let id = try world.beginUpdateAndWait(Fixtures.monkAgedOne)
        try await store.stack.flush()
        // Held before the commit, so that what the main context shows after it is what it was
        // told, not a fresh read of the row.
        let held = try #require(try world.fetch(Person.self, id: id))
        let other = try Context(stack: try store.reopen(), updateTarget: .persistentStore)
        try store.withWriterQueueSuspended {
            try world.beginUpdateAndWait { update in
                let monk = try #require(try update.fetch(Person.self, id: id))
                monk.age = 2
                monk.name = "Abbot"
                try update.commit()   // checked now, written once the queue resumes
            }
            #expect(held.age == 2 && held.name == "Abbot", "the main context was shown the commit")
            try other.beginUpdateAndWait { update in
                try #require(try update.fetch(Person.self, id: id)).age = 40
                try update.commit()
            }
        }
        if policy == .error {
            await #expect(throws: MergeConflictError.self) { try await store.stack.flush() }
            #expect(try store.writtenRows("SELECT name, age FROM \"Person\"") == [[.text(""), .integer(40)]])
        } else {
            try await store.stack.flush()
            #expect(recorder.all.isEmpty)
            let kept: (name: String, age: Int) = switch policy {
            case .rollback: ("", 40)
            case .overwrite: ("Abbot", 2)
            default: ("Abbot", 40)
            }
            #expect(try store.writtenRows("SELECT name, age FROM \"Person\"") == [[.text(kept.name), .integer(Int64(kept.age))]])
            _ = try world.fetchCount(Pet.self)    // a read: the main context takes what it was handed
            await mainQueueTurn()
            #expect([held.name, String(held.age)] == [kept.name, String(kept.age)], "the main context hears what was kept")
            #expect(try world.fetch(Person.self, id: id) === held)
        }
    }
}
