@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

@Suite(.timeLimit(.minutes(5))) struct ContextTests {
    /// A transaction whose body commits by itself too waits for, and reports, every commit.
    @Test(arguments: Setup.files) @MainActor
    func aTransactionReportsTheFailureOfAnEarlierCommitInItsBody(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let store = harness.store
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        try store.refuseWrites(ofName: "refused")
        await #expect(throws: SQLiteError.self) {
            try await harness.transaction { update in
                try update.create(Person.self).name = "refused"
                try update.commit()  // fails when written
                try update.create(Pet.self).name = "fine"
            }
        }
        #expect(recorder.all.isEmpty)
    }

    /// A write that lands between a main context's catch-up (under the store's lock) and its
    /// query's snapshot (outside it) would show the query a commit the context has not applied:
    /// the read notices, and reads again with its snapshot taken under the lock, applying the
    /// commit first. Without that, the fetched person would show the commit and the held pet,
    /// changed by the same commit, would not. (Not in memory, where reads wait for the writer's
    /// connection.)
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aWriteBeforeTheSnapshotMakesAMainContextReadAgain(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let (monkID, petID) = try world.beginUpdateAndWait(Fixtures.monkAndPet)
        let pet = try #require(try world.fetch(Pet.self, id: petID))
        // Written before the trace starts: written with the update below, in one group, it
        // would add the group's row locks (`SELECT 1 … FOR NO KEY UPDATE`) to the statements.
        try store.stack.flushAndWait()

        let armed = Locked(false)
        let statements = Locked<[String]>([])
        store.stack.trace { sql in
            statements.withLock { $0.append(sql) }
            // The main context's query has begun, its snapshot not yet taken.
            guard sql.hasPrefix("SELECT") && sql.contains("\"Person\""),
                  armed.withLock({ let was = $0; $0 = false; return was }) else { return }
            // An update of the main context on another thread: its commit is handed to the
            // main context when queued, and written before the query's first step.
            let written = DispatchSemaphore(value: 0)
            DispatchQueue.global().async {
                try? world.beginUpdateAndWait { update in
                    try update.fetch(Person.self, id: monkID)?.age = 44
                    try update.fetch(Pet.self, id: petID)?.age = 7
                    try update.commit()
                }
                try? store.stack.flushAndWait()
                written.signal()
            }
            written.wait()
        }
        defer { store.stack.trace(nil) }
        armed.withLock { $0 = true }
        let found = try world.fetchAll(Person.self, %"age" == 44)
        store.stack.trace(nil)
        #expect(found.map(\.objectID) == [monkID])
        #expect(pet.age == 7, "the read showed a commit its context had not applied")
        let read = statements.withLock { $0 }
        // Read again once, with the snapshot taken under the lock (SQLite's `SELECT 1 FROM
        // sqlite_master`, PostgreSQL's `BEGIN …; SELECT 1`).
        #expect(read.filter { $0.contains("SELECT 1") && !$0.contains("FOR NO KEY UPDATE") }.count == 1, "\(read)")
    }

    /// A main context that does not merge pins its view when it is made (and again after a
    /// reset). Pinned while a commit that waits to be written is queued, the view keeps showing
    /// what its first read showed once that commit is written.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aViewPinnedWhileACommitWaitsKeepsItsMoment(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let writer = try ContextStack.Context(stack: store.stack)
        let id = try writer.beginUpdateAndWait(Fixtures.monkAgedOne)
        let atUpdate = DispatchSemaphore(value: 0)
        let resume = DispatchSemaphore(value: 0)
        let armed = Locked(true)
        store.stack.trace { sql in
            // The writer runs the commit's statement: it is queued, not yet written.
            guard sql.hasPrefix("UPDATE"), armed.withLock({ let was = $0; $0 = false; return was }) else { return }
            atUpdate.signal()
            resume.wait()
        }
        defer { store.stack.trace(nil) }
        let written = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            try? writer.beginUpdateAndWait { update in
                try update.fetch(Person.self, id: id)?.age = 2
                try update.commit()
            }
            written.signal()
        }
        atUpdate.wait()
        // Pinned as it is made, while the commit waits.
        let world = try MainContext(stack: store.stack, updateTarget: .persistentStore)
        let first = try #require(try world.fetch(Person.self, id: id)).age
        resume.signal()
        written.wait()
        store.stack.trace(nil)
        #expect(try world.fetchAll(Person.self, %"age" == first).map(\.objectID) == [id])
    }

    /// A view pinned before a row was changed and then deleted still shows the row as it was:
    /// the delete's before-image is the whole row, with the values the change replaced.
    @Test(arguments: StoreKind.available) @MainActor
    func aViewPinnedBeforeAChangeThenADeleteKeepsTheRow(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let writer = try ContextStack.Context(stack: store.stack)
        let id = try writer.beginUpdateAndWait(Fixtures.monkAgedOne)
        try store.stack.flushAndWait()
        let world = try MainContext(stack: store.stack, updateTarget: .persistentStore)
        try writer.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: id)).age = 2
            try update.commit()
        }
        try writer.beginUpdateAndWait { update in
            try update.delete(#require(try update.fetch(Person.self, id: id)))
            try update.commit()
        }
        #expect(try world.fetchAll(Person.self).map(\.age) == [1])
    }

    /// A commit that waits to be written (`.persistentStore`) is seen by reads only once it is
    /// in SQLite, when its receivers hear of it: while the writer writes it, another context
    /// reads the row as it was, so no read can show a commit whose write then fails. (Not in
    /// memory, where reads wait for the writer's connection.)
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func aCommitThatWaitsIsReadOnlyOnceWritten(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let writer = try ContextStack.Context(stack: store.stack)
        let id = try writer.beginUpdateAndWait(Fixtures.monkAgedOne)
        let reader = try ContextStack.Context(stack: store.stack)
        let seen = Locked<[Int]>([])
        let armed = Locked(true)
        store.stack.trace { sql in
            // The writer runs the commit's statement: it is queued, not yet written.
            guard sql.hasPrefix("UPDATE"), armed.withLock({ let was = $0; $0 = false; return was }) else { return }
            let done = DispatchSemaphore(value: 0)
            DispatchQueue.global().async {
                if let age = try? reader.beginUpdateAndWait({ update in try update.fetch(Person.self, id: id)?.age }) {
                    seen.withLock { $0.append(age) }
                }
                done.signal()
            }
            done.wait()
        }
        defer { store.stack.trace(nil) }
        try writer.beginUpdateAndWait { update in
            try update.fetch(Person.self, id: id)?.age = 2
            try update.commit()
        }
        store.stack.trace(nil)
        #expect(seen.withLock { $0 } == [1])
        #expect(try reader.beginUpdateAndWait { update in try update.fetch(Person.self, id: id)?.age } == 2)
    }

    /// Main-context reads while its updates commit on another thread: every commit changes two
    /// people together, so after any read the two held people show the same commit — whichever
    /// way each read's snapshot was taken. With a root, a commit is handed to the main context
    /// when queued and written later; without one, it is handed over once written, and reads
    /// see it only from then on (before, the queue showed it to reads first).
    @Test(arguments: StoreKind.available.filter { $0 != .memory }, [Stack.RootContext.shared, .none]) @MainActor
    func mainContextReadsNeverShowHalfACommit(kind: StoreKind, root: Stack.RootContext) throws {
        let store = try TestStore(kind, rootContext: root)
        let world = try MainContext(stack: store.stack)
        let ids = try world.beginUpdateAndWait { update in
            let first = try update.create(Person.self)
            first.name = "first"
            let second = try update.create(Person.self)
            second.name = "second"
            try update.commit()
            return [first.objectID, second.objectID]
        }
        let second = try #require(try world.fetch(Person.self, id: ids[1]))
        let finished = Locked(false)
        DispatchQueue.global().async {
            for age in 1...300 {
                try? world.beginUpdateAndWait { update in
                    for id in ids { try update.fetch(Person.self, id: id)?.age = age }
                    try update.commit()
                }
            }
            finished.withLock { $0 = true }
        }
        var reads = 0
        var last = false
        while !last {
            last = finished.withLock { $0 }
            let first = try #require(try world.fetch(Person.self, %"name" == "first"))
            #expect(first.age == second.age, "read \(reads) showed half a commit")
            reads += 1
            if first.age != second.age { break }
        }
        try store.stack.flushAndWait()
        #expect(try world.fetch(Person.self, %"name" == "first")?.age == 300)
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
        _ = farmer.pets                                  // an internal read
        #expect(pet.age == 0)
        _ = try world.fetch(Pet.self, id: pet.objectID)  // a public read catches up, though it holds the pet
        #expect(pet.age == 7)
    }

    @Test(arguments: Setup.merging) @MainActor
    func theMainContextSeesACommitWhenCommitReturns(setup: Setup) throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try harness.update { update in
            let farmer = try update.create(Person.self)
            farmer.name = "Farmer"
            farmer.age = 28
            try update.commit()
        }
        // No flush: the root may not have written yet; the main context sees it all the same.
        #expect(try world.fetch(Person.self, %"name" == "Farmer")?.age == 28)
        #expect(try world.fetchCount(Person.self) == 1)
    }

    @Test(arguments: Setup.merging) @MainActor
    func registeredObjectsShowCommittedChangesWithoutRefetching(setup: Setup) throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try harness.update { update in
            try update.create(Person.self).name = "Monk"
            try update.commit()
        }
        let monk = try #require(try world.fetch(Person.self, %"name" == "Monk"))
        try harness.update { update in
            try update.use(monk).age = 44
            try update.commit()
        }
        #expect(monk.age == 44)
        try harness.update { update in
            try update.delete(update.use(monk))
            try update.commit()
        }
        #expect(monk.isDeleted)
        #expect(monk.name == "Monk")  // last values stay readable
        #expect(try world.fetch(Person.self, id: monk.objectID) == nil)
    }

    @Test(arguments: Setup.merging) @MainActor
    func flushMakesCommitsDurable(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let (store, world) = (harness.store, harness.world)
        for index in 0..<20 {
            harness.beginUpdate { update in
                let pet = try update.create(Pet.self)
                pet.age = index
                try update.commit()
            }
        }
        // beginUpdate is asynchronous: wait until each block has committed, then flush.
        while try world.fetchCount(Pet.self) < 20 { await Task.yield() }
        try await store.stack.flush()
        #expect(try store.scalar("SELECT count(*) FROM \"Pet\"") == .integer(20))
    }

    @Test(arguments: Setup.files) @MainActor
    func transactionResumesOnceDurable(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let store = harness.store
        let name = try await harness.transaction { update in
            let pet = try update.create(Pet.self)
            pet.name = "Rex"
            return pet.name
        }
        #expect(name == "Rex")
        let db = try store.rawConnection()
        #expect(try db.scalar("SELECT name FROM Pet") == .text("Rex"))
    }

    @Test(arguments: Setup.all) @MainActor
    func transactionRethrowsAndRollsBack(setup: Setup) async throws {
        struct Boom: Error {}
        let harness = try TopologyHarness(setup)
        let world = harness.world
        await #expect(throws: Boom.self) {
            try await harness.transaction { update in
                try update.create(Pet.self).name = "Ghost"
                throw Boom()
            }
        }
        try await harness.stack.flush()
        try await harness.settle()
        #expect(try world.fetchCount(Pet.self) == 0)
    }

    /// Docs/Servers.md, "Writes": a body that commits and then throws keeps that commit; only
    /// what it changed after the commit is rolled back, and the caller gets the body's error.
    @Test(arguments: Setup.all) @MainActor
    func aTransactionThatCommitsAndThenThrowsKeepsItsCommit(setup: Setup) async throws {
        struct Boom: Error {}
        let harness = try TopologyHarness(setup)
        await #expect(throws: Boom.self) {
            try await harness.transaction { update in
                try update.create(Pet.self).name = "Kept"
                try update.commit()
                try update.create(Pet.self).name = "Ghost"
                throw Boom()
            }
        }
        try await harness.stack.flush()
        try await harness.settle()
        #expect(try harness.world.fetchAll(Pet.self).map(\.name) == ["Kept"])
    }

    @Test(arguments: Setup.all) @MainActor
    func aThrowingUpdateBlockRollsBackAndAndWaitRethrows(setup: Setup) async throws {
        struct Boom: Error {}
        let harness = try TopologyHarness(setup)
        let world = harness.world
        #expect(throws: Boom.self) {
            try harness.update { update in
                try update.create(Pet.self).name = "Ghost"
                throw Boom()
            }
        }
        try await harness.stack.flush()
        try await harness.settle()
        #expect(try world.fetchCount(Pet.self) == 0)
    }

    @Test(arguments: Setup.all) @MainActor
    func beginUpdateDeliversErrorsToOnError(setup: Setup) async throws {
        struct Boom: Error {}
        let harness = try TopologyHarness(setup)
        let store = harness.store
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        harness.beginUpdate { _ in throw Boom() }
        try await store.stack.flush()
        while recorder.all.isEmpty { await Task.yield() }
        #expect(recorder.all.first is Boom)
    }

    /// Docs/Concurrency.md, "Errors in the background": an error that leaves a block of a
    /// long-lived context rolls back every uncommitted change of the context, those earlier
    /// blocks left pending too, so a later commit saves none of them; from a `perform` block,
    /// the error also reaches `stack.onError`.
    @Test(arguments: Setup.all) @MainActor
    func anErrorLeavingALongLivedContextsBlockRollsBackWhatEarlierBlocksLeft(setup: Setup) async throws {
        struct Boom: Error {}
        let harness = try TopologyHarness(setup)
        let recorder = ErrorRecorder()
        harness.stack.onError = { recorder.record($0) }
        let context = harness.updater?.beginUpdateContext() ?? harness.world.beginUpdateContext()
        try context.performAndWait { update in try update.create(Pet.self).name = "Ghost" }
        #expect(throws: Boom.self) { try context.performAndWait { _ in throw Boom() } }
        try context.performAndWait { update in
            try update.create(Pet.self).name = "Kept"
            try update.commit()
        }
        try context.performAndWait { update in try update.create(Pet.self).name = "Ghost too" }
        context.perform { _ in throw Boom() }
        try context.performAndWait { update in
            try update.create(Pet.self).name = "Kept too"
            try update.commit()
        }
        try await harness.stack.flush()
        try await harness.settle()
        #expect(try harness.world.fetchAll(Pet.self, orderBy: .ascending("name")).map(\.name) == ["Kept", "Kept too"])
        #expect(recorder.all.count == 1 && recorder.all.first is Boom, "\(recorder.all)")
    }

    @Test(arguments: Setup.all) @MainActor
    func nothingIsSavedWithoutCommit(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        let store = harness.store
        try await harness.write { update in
            try update.create(Pet.self).name = "Uncommitted"
        }
        try await store.stack.flush()
        #expect(try world.fetchCount(Pet.self) == 0)
        world.beginUpdate { update in update.rollback() }
        #expect(try world.fetchCount(Pet.self) == 0)
    }

    @Test @MainActor func aLongLivedUpdateContextAccumulatesChangesAcrossPerform() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let context = world.beginUpdateContext()
        let created = try context.performAndWait { update in try update.create(Pet.self).objectID }
        try context.performAndWait { update in
            let pet = try #require(try update.fetch(Pet.self, id: created))
            #expect(pet.isInserted)
            pet.name = "Later"
        }
        #expect(try world.fetchCount(Pet.self) == 0)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            context.perform { update in
                try update.commit()
                done.resume()
            }
        }
        #expect(try world.fetch(Pet.self, id: created)?.name == "Later")
    }

    /// Docs/GettingStarted.md: a long-lived update context is not told of other contexts'
    /// commits, and `fetch` and `fetchAll` refresh the objects they return. Their to-many
    /// relationships too: a pet another update gave the farmer is among its pets once a fetch
    /// returned the farmer again, as its owner's side already says.
    @Test(arguments: StoreKind.available) @MainActor
    func aRefetchInALongLivedUpdateRefreshesToManyRelationships(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let farmerID = try world.beginUpdateAndWait { update in
            let farmer = try update.create(Person.self)
            farmer.name = "Farmer"
            try update.commit()
            return farmer.objectID
        }
        let context = world.beginUpdateContext()
        var held: Person?
        try context.performAndWait { update in
            held = try update.fetch(Person.self, id: farmerID)
            #expect(held?.pets.isEmpty == true)
        }
        try world.beginUpdateAndWait { update in
            let fido = try update.create(Pet.self)
            (fido.name, fido.owner) = ("Fido", try update.fetch(Person.self, id: farmerID))
            try update.commit()
        }
        try await store.stack.flush()
        try context.performAndWait { update in
            #expect(try update.fetchAll(Person.self).map(\.objectID) == [farmerID])
            #expect(held?.pets.map(\.name) == ["Fido"])
            let fido = try update.fetch(Pet.self)
            #expect(fido?.owner === held)
        }
    }

    /// A member read again in a long-lived update, after another context's commit moved it to
    /// another owner, leaves the loaded list of the owner it left, whether it was held loaded
    /// (a refetch refreshes it) or as a fault (its values load). Before, the old owner's list
    /// still held it, and deleting that owner cascaded to the pet of someone else.
    @Test(arguments: StoreKind.available, [false, true]) @MainActor
    func aMemberReadAgainAfterMovingLeavesItsOldOwnersLoadedList(kind: StoreKind, asFault: Bool) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let (ann, bob, rex) = (try update.create(Person.self), try update.create(Person.self), try update.create(Pet.self))
            (ann.name, bob.name, rex.name, rex.owner) = ("Ann", "Bob", "Rex", ann)
            try update.commit()
        }
        try await store.stack.flush()
        let context = world.beginUpdateContext()
        var held: (ann: Person, rex: Pet)?
        try context.performAndWait { update in
            let rex = try #require(try update.fetchAll(Pet.self, options: asFault ? .noPropertyValues : FetchOptions()).first)
            let ann = try #require(try update.fetch(Person.self, %"name" == "Ann"))
            #expect(ann.pets == [rex])
            held = (ann, rex)
        }
        let mover = try Context(stack: store.stack, updateTarget: .persistentStore)
        try mover.beginUpdateAndWait { update in
            try #require(try update.fetch(Pet.self)).owner = try update.fetch(Person.self, %"name" == "Bob")
            try update.commit()
        }
        try context.performAndWait { update in
            let (ann, rex) = try #require(held)
            if asFault {
                #expect(rex.isFault)
                #expect(rex.name == "Rex")
            } else {
                #expect(try update.fetch(Pet.self, %"name" == "Rex") === rex)
            }
            #expect(rex.owner?.name == "Bob")
            #expect(ann.pets.isEmpty)
            try update.delete(ann)    // `pets` cascades: to no pet now
            try update.commit()
        }
        try await store.stack.flush()
        world.reset()
        #expect(try world.fetchAll(Pet.self).map { "\($0.name) \($0.owner?.name ?? "-")" } == ["Rex Bob"])
    }

    @Test @MainActor func updatePerformContinuesInTheSameContext() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Monk"
            try update.commit()
        }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            try? world.beginUpdateAndWait { update in
                let monk = try update.fetch(Person.self, %"name" == "Monk")
                update.perform { update in
                    monk?.age = 44
                    try update.commit()
                    done.resume()
                }
            }
        }
        #expect(try world.fetch(Person.self, %"name" == "Monk")?.age == 44)
    }

    @Test(arguments: Setup.all) @MainActor
    func oneObjectPerIDPerContext(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            try update.create(Person.self).name = "Monk"
            let again = try update.fetchAll(Person.self)
            let byName = try update.fetch(Person.self, %"name" == "Monk")
            #expect(again.count == 1 && again[0] === byName)
            try update.commit()
        }
        let a = try world.fetch(Person.self)
        let b = try world.fetchAll(Person.self).first
        #expect(a != nil && a === b)
        #expect(try world.fetch(Person.self, id: a!.objectID) === a)
    }

    @Test(arguments: Setup.all) @MainActor
    func unchangedObjectsAreHeldWeakly(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            try update.create(Pet.self).name = "Rex"
            try update.commit()
        }
        weak var weakPet: Pet?
        var id: ObjectID?
        do {
            let pet = try world.fetch(Pet.self)
            weakPet = pet
            id = pet?.objectID
        }
        #expect(weakPet == nil)
        #expect(world.core.registered(id!) == nil)
        #expect(try world.fetch(Pet.self, id: id!)?.name == "Rex")
    }

    /// An object does not retain its entity (`ManagedObject.entity` is `unowned(unsafe)`): it
    /// holds its context, which holds the model's graph, which holds the entity. With the stack
    /// and the context let go, the entity lives as long as the object, which still reads.
    @Test(arguments: StoreKind.available) @MainActor
    func anObjectKeepsItsEntityAliveAfterItsStackIsLetGo(kind: StoreKind) throws {
        weak var weakEntity: ResolvedEntity?
        weak var weakContext: ContextCore?
        var pet: Pet?
        do {
            let store = try TestStore(kind)
            let world = try MainContext(stack: store.stack)
            try world.beginUpdateAndWait { update in
                try update.create(Pet.self).name = "Rex"
                try update.commit()
            }
            pet = try world.fetch(Pet.self)
            weakEntity = pet?.entity
            weakContext = world.core
        }
        #expect(weakContext != nil)
        #expect(weakEntity != nil)
        #expect(pet?.name == "Rex")
        #expect(pet?.description.hasPrefix("<Pet ") == true)
        #expect(pet?.entity === weakContext?.graph.entity(for: Pet.self))
    }

    @Test(arguments: Setup.all) @MainActor
    func resetDropsObjects(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            try update.create(Pet.self).name = "Rex"
            try update.commit()
        }
        let before = try #require(try world.fetch(Pet.self))
        world.reset()
        let after = try #require(try world.fetch(Pet.self))
        #expect(before !== after)
        #expect(after.name == "Rex")
    }

    @Test(arguments: Setup.all) @MainActor
    func useBringsAnObjectIntoTheUpdateAndFailsForDeletedOnes(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            try update.create(Pet.self).name = "Rex"
            try update.commit()
        }
        let rex = try #require(try world.fetch(Pet.self))
        try await harness.write { update in
            let mine = try update.use(rex)
            #expect(mine !== rex && mine.objectID == rex.objectID)
            try update.delete(mine)
            try update.commit()
        }
        await #expect {
            try await harness.write { update in _ = try update.use(rex) }
        } throws: { error in
            (error as? QueryError)?.code == .objectNotFound
        }
    }

    @Test(arguments: StoreKind.available) @MainActor
    func aStackWithoutARootWritesOnCommit(kind: StoreKind) throws {
        let store = try TestStore(kind, rootContext: .none)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try update.create(Pet.self).name = "Rex"
            try update.commit()
        }
        #expect(try store.overlayIsEmpty)
        #expect(try store.scalar("SELECT name FROM \"Pet\"") == .text("Rex"))
        #expect(try world.fetch(Pet.self)?.name == "Rex")
    }

    @Test(arguments: Setup.all) @MainActor
    func deleteAllDeletesMatchingObjectsAndCountsThem(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            for age in [-2, -1, 0, 5] { try update.create(Pet.self).age = age }
            try update.commit()
        }
        let removed = try await harness.transaction { update in try update.deleteAll(Pet.self, %"age" < 0) }
        try await harness.settle()
        #expect(removed == 2)
        #expect(try world.fetchAll(Pet.self, orderBy: .ascending("age")).map(\.age) == [0, 5])
    }
}

@Suite(.timeLimit(.minutes(5))) struct ContextLifetimeTests {
    @Test @MainActor func updatePerformFromALaterCallbackKeepsTheUpdate() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let callbacks = DispatchQueue(label: "callbacks")
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            world.beginUpdate { update in
                let pet = try update.create(Pet.self)
                pet.name = "Rex"
                // The block returns before the callback continues the update.
                callbacks.asyncAfter(deadline: .now() + .milliseconds(20)) {
                    update.perform { update in
                        pet.age = 3
                        try update.commit()
                        done.resume()
                    }
                }
            }
        }
        let pet = try #require(try world.fetch(Pet.self))
        #expect(pet.name == "Rex" && pet.age == 3)
    }

    @Test(arguments: Setup.files) @MainActor
    func aFailedTransactionSaveGoesToItsCallerOnly(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let (store, world) = (harness.store, harness.world)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        try store.refuseWrites(ofName: "refused")
        try await harness.transaction { update in try update.create(Person.self).name = "a" }
        await #expect {
            try await harness.transaction { update in try update.create(Person.self).name = "refused" }
        } throws: { error in
            (error as? SQLiteError)?.code.primary == .constraint
        }
        try await store.stack.flush()
        try await harness.settle()
        #expect(recorder.all.isEmpty)
        #expect(try world.fetchCount(Person.self) == 1)
    }

    /// A save that fails reaches someone on every topology: with a root writing in the
    /// background, `onError` and the next `flush` (once); without one, the `commit()` that
    /// wrote it, and nobody else. Either way the commit fails as a whole.
    @Test(arguments: Setup.all) @MainActor
    func aFailedSaveReachesSomeoneOnce(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let recorder = ErrorRecorder()
        harness.stack.onError = { recorder.record($0) }
        try harness.store.refuseWrites(ofName: "refused")
        try await harness.write { update in
            try update.create(Person.self).name = "a"
            try update.commit()
        }
        let failingCommit: (Update) throws -> Void = { update in
            try update.create(Person.self).name = "refused"
            try update.create(Pet.self).name = "lost with its commit"
            try update.commit()
        }
        switch setup.topology {
        case .threeTier, .twoTierAutoMerge, .twoTierWithoutMerge:
            try harness.update(failingCommit)
            await #expect { try await harness.stack.flush() } throws: { isRefusal($0) }
            try await harness.stack.flush()  // reported once
            #expect(recorder.all.count == 1)
        case .threeTierWithoutRoot, .perConsumer:
            #expect { try harness.update(failingCommit) } throws: { isRefusal($0) }
            try await harness.stack.flush()
            #expect(recorder.all.isEmpty, "the caller caught it; it is not reported again")
        }
        try await harness.settle()
        #expect(try harness.world.fetchCount(Person.self) == 1)
        #expect(try harness.world.fetchCount(Pet.self) == 0)  // the commit failed as a whole
    }
}
