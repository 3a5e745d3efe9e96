@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// A commit handed to a merging main context before the root wrote it, whose write then
/// fails: the main context (and observers) are told what undoes it, so they show what is stored.
@Suite struct FailedSaveTests {
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

    /// Docs/Concurrency.md, "Errors in the background": a database error thrown by `commit()`
    /// of a commit that waits to be written (a stack without a root) leaves the update's
    /// changes pending, every one of them: fixed, the same update commits them again.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func aCommitTheDatabaseRefusedStaysPendingAndCommitsAgain(kind: StoreKind) throws {
        let store = try TestStore(kind, rootContext: .none)
        let context = try Context(stack: store.stack)
        try store.refuseWrites(ofName: "refused")
        try context.beginUpdateAndWait { update in
            let person = try update.create(Person.self)
            person.name = "refused"
            let rex = try update.create(Pet.self)
            rex.name = "Rex"
            rex.owner = person
            let error = #expect(throws: (any Error).self) { try update.commit() }
            #expect(error.map(isRefusal) == true, "\(String(describing: error))")
            person.name = "accepted"
            try update.commit()
        }
        let stored = try context.beginUpdateAndWait { update in
            try update.fetchAll(Pet.self).map { [$0.name, $0.owner?.name ?? "-"] }
        }
        #expect(stored == [["Rex", "accepted"]])
    }

    /// Every commit a `transaction` makes is its caller's (no one else hears of its failure),
    /// so none may be lost: when the body throws after committing, the body's error is thrown
    /// and the save failure goes to `onError`; when the body committed twice and both fail,
    /// the first is thrown and the second goes to `onError` (Docs/Concurrency.md, "Errors").
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func noSaveFailureOfATransactionIsLost(kind: StoreKind) async throws {
        struct Oops: Error {}
        let store = try TestStore(kind)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let world = try MainContext(stack: store.stack)
        _ = try await world.transaction { update in
            try update.create(Person.self).name = "seed"
            try update.commit()
        }
        try store.refuseWrites(ofName: "refused")

        await #expect(throws: Oops.self) {
            try await world.transaction { update in
                try update.create(Person.self).name = "refused"
                try update.commit()
                throw Oops()
            }
        }
        #expect(recorder.all.count == 1 && recorder.all.allSatisfy(TestStore.isRefusal), "\(recorder.all)")

        let error = await #expect(throws: (any Error).self) {
            try await world.transaction { update in
                for _ in 0..<2 {
                    try update.create(Person.self).name = "refused"
                    try update.commit()
                }
            }
        }
        #expect(error.map(TestStore.isRefusal) == true, "\(String(describing: error))")
        #expect(recorder.all.count == 2 && recorder.all.allSatisfy(TestStore.isRefusal), "\(recorder.all)")
        try await store.stack.flush()

        // A commit of an `update.perform` continuation, which runs after the transaction
        // returned, is not the transaction's: its failure goes to onError and the next flush.
        let continued = Locked(false)
        _ = try await world.transaction { update in
            update.perform { later in
                try later.create(Person.self).name = "refused"
                try later.commit()
                continued.withLock { $0 = true }
            }
        }
        while !continued.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        #expect(recorder.all.count == 3, "\(recorder.all)")
        #expect(try store.writtenRows("SELECT name FROM \"Person\"") == [[.text("seed")]])
    }

    static let mergingTargets: [UpdateTarget] = [.mainContext, .rootContext(autoMerge: true)]

    /// A file store whose errors are recorded, a main context of `target`, and Monk (63),
    /// stored and fetched by it.
    @MainActor static func aStoredMonk(_ target: UpdateTarget) async throws -> (TestStore, ErrorRecorder, MainContext, Person) {
        let store = try TestStore(.file)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let world = try MainContext(stack: store.stack, updateTarget: target)
        try world.beginUpdateAndWait { update in
            let monk = try update.create(Person.self)
            (monk.name, monk.age) = ("Monk", 63)
            try update.commit()
        }
        try await store.stack.flush()
        return (store, recorder, world, try #require(try world.fetch(Person.self, %"name" == "Monk")))
    }

    @Test(arguments: mergingTargets) @MainActor
    func aFailedBackgroundSaveIsUndoneInMergingMainContexts(target: UpdateTarget) async throws {
        let (store, recorder, world, monk) = try await Self.aStoredMonk(target)
        try store.refuseWrites(ofName: "refused")
        try store.stack.sqliteStore.writer.withLock { writer in
            try writer.connection.execute("""
                CREATE TEMP TRIGGER "refuse_age" BEFORE UPDATE ON main."Person" WHEN NEW.age = 99
                BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
                """)
        }
        // Both changes in one commit, which the root then fails to write — not before the main
        // context has shown them: the test holds the writer until then.
        let refused = try store.stack.sqliteStore.writer.withLock { _ in
            try world.beginUpdateAndWait { update in
                try update.use(monk).age = 99
                try update.create(Person.self).name = "refused"
                try update.commit()
            }
            return try #require(try world.fetch(Person.self, %"name" == "refused"))
        }
        #expect(monk.age == 99)
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        // Docs/Topologies.md, "Durability": a flush throws a background error once.
        try await store.stack.flush()
        try store.stack.flushAndWait()
        // The next read — one that does not refetch them — brings the objects held back to
        // what is stored: the change undone, the insert gone.
        #expect(try world.fetchCount(Person.self, %"age" == 99) == 0)
        #expect(monk.age == 63)
        #expect(refused.isDeleted)
        #expect(try world.fetchAll(Person.self).map(\.name) == ["Monk"])
        #expect(recorder.all.count == 1)
    }

    /// A failed commit is undone even when a later commit, queued before it failed but not
    /// written with it, changed another attribute of the same object. The pending changes of
    /// both were kept as one entry of the overlay (what every read sees on top of the store),
    /// which outlived the failed commit: the undo read its value back from there, found it
    /// "stored", and the main context showed the refused age for good.
    @Test(arguments: mergingTargets) @MainActor
    func aFailedSaveIsUndoneWhenALaterCommitChangedTheSameObject(target: UpdateTarget) async throws {
        let (store, recorder, world, monk) = try await Self.aStoredMonk(target)
        let queued = store.stack.sqliteStore
        try queued.writer.withLock { writer in
            try writer.connection.execute("""
                CREATE TEMP TRIGGER "refuse_age" BEFORE UPDATE ON main."Person" WHEN NEW.age = 99
                BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
                """)
        }
        try store.holdingTheWriter {
            try world.beginUpdateAndWait { update in
                try update.use(monk).age = 99
                try update.commit()
            }
            // The writer took the first commit alone, and waits for the held writer.
            for _ in 0..<60_000 where !queued.state.withLock({ $0.queue.isEmpty }) { usleep(1_000) }
            try #require(queued.state.withLock { $0.queue.isEmpty })
            try world.beginUpdateAndWait { update in
                try update.use(monk).name = "Monk II"
                try update.commit()
            }
            #expect(monk.age == 99 && monk.name == "Monk II")
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        try store.stack.flushAndWait()
        _ = try world.fetchCount(Pet.self)    // a read applies the undoing commit
        await mainQueueTurn()
        #expect(try store.writtenRows("SELECT name, age FROM \"Person\"") == [[.text("Monk II"), .integer(63)]])
        #expect(monk.age == 63 && monk.name == "Monk II", "\(monk.age) \(monk.name)")
        #expect(try world.fetchCount(Person.self, %"age" == 99) == 0)
        #expect(recorder.all.count == 1)
    }

    /// What undoes a failed commit reads its rows in lists of keys: a failed import of 2,000
    /// people is a few statements under the store's lock, not 2,000.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aFailedImportIsUndoneWithAFewReads(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let world = try MainContext(stack: store.stack, updateTarget: .mainContext)
        try store.refuseWrites(ofName: "refused")
        let statements = Locked<[String]>([])
        store.stack.trace { sql in statements.withLock { $0.append(sql) } }
        try world.beginUpdateAndWait { update in
            for index in 0..<2_000 { try update.create(Person.self).name = "P\(index)" }
            try update.create(Person.self).name = "refused"
            try update.commit()
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        store.stack.trace(nil)
        await mainQueueTurn()
        // The writer's reads of the rows, after its transaction failed.
        let reads = statements.withLock { $0 }.filter { $0.hasPrefix("SELECT") && $0.contains("\"Person\"") }
        #expect(reads.count < 20, "\(reads.count) reads")
        #expect(try world.fetchCount(Person.self) == 0)
        #expect(recorder.all.count == 1)
    }

    /// A main context that does not merge, reset while a commit waited to be written, shows
    /// that commit: its pinned view holds the commits the root had accepted by then. When the
    /// writer then fails the commit, the context's objects are undone as a merging one's are —
    /// the refused insert deleted, the change made with it back to what is stored — and its
    /// reads agree.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aFailedSaveIsUndoneInAMainContextThatDoesNotMergeWhoseViewShowedIt(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let quiet = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        try quiet.beginUpdateAndWait { update in
            let monk = try update.create(Person.self)
            (monk.name, monk.age) = ("Monk", 63)
            try update.create(Person.self).name = "Knight"
            try update.commit()
        }
        try await store.stack.flush()
        quiet.reset()
        let knight = try #require(try quiet.fetch(Person.self, %"name" == "Knight"))
        try store.refuseWrites(ofName: "refused")
        let (monk, refused) = try store.holdingTheWriter {
            try quiet.beginUpdateAndWait { update in
                try #require(try update.fetch(Person.self, %"name" == "Monk")).age = 99
                try #require(try update.fetch(Person.self, %"name" == "Knight")).age = 40
                try update.create(Person.self).name = "refused"
                try update.commit()
            }
            #expect(knight.age == 0, "a context that does not merge keeps what it held")
            // Reset while the commit waits: the new view shows it.
            quiet.reset()
            let monk = try #require(try quiet.fetch(Person.self, %"name" == "Monk"))
            let refused = try #require(try quiet.fetch(Person.self, %"name" == "refused"))
            #expect(monk.age == 99)
            return (monk, refused)
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        await mainQueueTurn()
        #expect(monk.age == 63, "the refused change is undone in the view that showed it")
        #expect(refused.isDeleted)
        #expect(try quiet.fetch(Person.self, id: refused.objectID) == nil)
        #expect(try quiet.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["Knight", "Monk"])
        #expect(try quiet.fetchCount(Person.self, %"age" == 99) == 0)
        #expect(recorder.all.count == 1)
    }

    /// An update that commits Abbot's `friend` set to the person named `name`.
    static func abbotBefriends(_ name: String) -> @Sendable (Update) throws -> Void {
        { update in
            let abbot = try #require(try update.fetch(Person.self, %"name" == "Abbot"))
            abbot.friend = try update.fetch(Person.self, %"name" == name)
            try update.commit()
        }
    }

    /// A main context that does not merge, under `policy`, on a store holding people named
    /// `names`, and a context of another stack on the same store, writing at once as another
    /// process would.
    @MainActor static func viewAndAnotherProcess(_ kind: StoreKind, policy: MergePolicy = .objectTrump,
                                                 _ names: [String]) async throws -> (TestStore, MainContext, Context) {
        let store = try TestStore(kind)
        let quiet = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false), mergePolicy: policy)
        try quiet.beginUpdateAndWait { update in
            for name in names { try update.create(Person.self).name = name }
            try update.commit()
        }
        try await store.stack.flush()
        return (store, quiet, try Context(stack: try store.reopen(), updateTarget: .persistentStore))
    }

    /// A main context that does not merge, on a store holding Monk, 63, and what `seed` makes,
    /// whose writer refuses rows named "refused" (errors to `onError` are dropped).
    @MainActor static func viewRefusingWrites(_ kind: StoreKind, _ seed: (Update) throws -> Void) async throws -> (TestStore, MainContext) {
        let store = try TestStore(kind)
        store.stack.onError = { _ in }
        let quiet = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        try quiet.beginUpdateAndWait { update in
            let monk = try update.create(Person.self)
            (monk.name, monk.age) = ("Monk", 63)
            try seed(update)
            try update.commit()
        }
        try await store.stack.flush()
        try store.refuseWrites(ofName: "refused")
        return (store, quiet)
    }

    /// The live results of such a context follow what undoes the failed commit, as those of a
    /// merging one follow the commit that undoes it: the refused insert leaves them, reported
    /// as a deleted row, and the refused change's object leaves results it no longer matches.
    /// Before, they kept showing the refused object (deleted by then) until `reset()`.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func liveResultsOfAMainContextThatDoesNotMergeFollowWhatUndoesAFailedCommitTheirViewShowed(kind: StoreKind) async throws {
        let (store, quiet) = try await Self.viewRefusingWrites(kind) { update in
            try update.create(Person.self).name = "Knight"
        }
        let (everyone, aged) = try store.holdingTheWriter {
            try quiet.beginUpdateAndWait { update in
                try #require(try update.fetch(Person.self, %"name" == "Monk")).age = 99
                try update.create(Person.self).name = "refused"
                try update.commit()
            }
            quiet.reset()
            return (try FetchedResults(context: quiet, Person.self, orderBy: .ascending("name")),
                    try FetchedResults(context: quiet, Person.self, %"age" == 99))
        }
        #expect(everyone.objects.map(\.name) == ["Knight", "Monk", "refused"], "the view shows the commit as queued")
        #expect(aged.objects.map(\.name) == ["Monk"])
        var changes: [ResultsChange] = []
        everyone.onChange = { changes.append($0) }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        await mainQueueTurn()
        #expect(everyone.objects.map(\.name) == ["Knight", "Monk"])
        #expect(aged.objects.isEmpty, "Monk is 63 again")
        #expect(changes.count == 1)
        #expect(changes.first?.deletedRows == [IndexPath(item: 2, section: 0)])
        #expect(everyone.objects.allSatisfy { !$0.isDeleted })
    }

    /// The same for the writer's correction of a commit the view showed: under `.storeTrump`
    /// another process's name, saved while the commit waited, wins, and results ordered by
    /// name move the object to where the saved name puts it.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func liveResultsOfAMainContextThatDoesNotMergeFollowTheWritersCorrection(kind: StoreKind) async throws {
        let (store, quiet, other) = try await Self.viewAndAnotherProcess(kind, policy: .storeTrump, ["Monk", "Knight"])
        let results = try store.holdingTheWriter {
            try quiet.beginUpdateAndWait { update in
                try #require(try update.fetch(Person.self, %"name" == "Monk")).name = "Abbot"
                try update.commit()
            }
            try other.beginUpdateAndWait { update in
                try #require(try update.fetch(Person.self, %"name" == "Monk")).name = "Zealot"
                try update.commit()
            }
            quiet.reset()
            return try FetchedResults(context: quiet, Person.self, orderBy: .ascending("name"))
        }
        #expect(results.objects.map(\.name) == ["Abbot", "Knight"], "the view shows the commit as queued")
        var changes: [ResultsChange] = []
        results.onChange = { changes.append($0) }
        try await store.stack.flush()
        await mainQueueTurn()
        #expect(results.objects.map(\.name) == ["Knight", "Zealot"])
        #expect(changes.count == 1)
        #expect(changes.first?.movedRows.isEmpty == false)
    }

    /// A row the failed commit inserted that a later commit deleted while both waited: the
    /// later commit recorded the row for the view before deleting it, with the failed commit's
    /// values. The view that showed the insert drops it all the same.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aRowAFailedCommitInsertedIsGoneFromAViewThatShowedItThoughALaterCommitDeletedIt(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        store.stack.onError = { _ in }
        let quiet = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        try quiet.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Knight"
            try update.commit()
        }
        try await store.stack.flush()
        try store.refuseWrites(ofName: "refused")
        let refused = try store.holdingTheWriter {
            try quiet.beginUpdateAndWait { update in
                try update.create(Person.self).name = "refused"
                try update.commit()
            }
            quiet.reset()
            let refused = try #require(try quiet.fetch(Person.self, %"name" == "refused"))
            try quiet.beginUpdateAndWait { update in
                try update.delete(try #require(try update.fetch(Person.self, %"name" == "refused")))
                try update.commit()
            }
            return refused
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        await mainQueueTurn()
        #expect(try quiet.fetchAll(Person.self).map(\.name) == ["Knight"])
        #expect(try quiet.fetch(Person.self, id: refused.objectID) == nil)
        #expect(refused.isDeleted)
    }

    /// The same for what the failed commit changed: a later commit, queued after the view was
    /// pinned, recorded the rows it changed for the view as the view showed them — with the
    /// failed commit's values. The view drops those values with the commit: Monk's age and the
    /// article's tag are back to what they were before it, not what the later commit (which
    /// the view does not show) made them. Before, the view kept showing 99 and the tag.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func whatAFailedCommitChangedLeavesAViewThatShowedItThoughALaterCommitChangedItToo(kind: StoreKind) async throws {
        let (store, quiet) = try await Self.viewRefusingWrites(kind) { update in
            try update.create(Article.self).title = "A"
            try update.create(Tag.self).name = "t"
        }
        let (monk, article) = try store.holdingTheWriter {
            try quiet.beginUpdateAndWait { update in
                try #require(try update.fetch(Person.self, %"name" == "Monk")).age = 99
                try #require(try update.fetch(Article.self)).tags.insert(try #require(try update.fetch(Tag.self)))
                try update.create(Person.self).name = "refused"
                try update.commit()
            }
            quiet.reset()
            let monk = try #require(try quiet.fetch(Person.self, %"name" == "Monk"))
            let article = try #require(try quiet.fetch(Article.self))
            #expect(monk.age == 99 && article.tags.map(\.name) == ["t"], "the view shows the commit as queued")
            try quiet.beginUpdateAndWait { update in
                try #require(try update.fetch(Person.self, %"name" == "Monk")).age = 50
                try #require(try update.fetch(Article.self)).tags = []
                try update.commit()
            }
            return (monk, article)
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        await mainQueueTurn()
        #expect(try store.writtenRows("SELECT age FROM \"Person\"") == [[.integer(50)]], "the later commit is saved")
        #expect(monk.age == 63)
        #expect(try quiet.fetchCount(Person.self, %"age" == 99) == 0)
        #expect(try quiet.fetchCount(Person.self, %"age" == 63) == 1)
        #expect(article.tags.isEmpty)
        quiet.reset()
        #expect(try quiet.fetch(Person.self)?.age == 50, "a reset shows what is stored")
    }

    /// An update that sets Monk's age to `age` and commits it.
    static func monkAged(_ age: Int) -> @Sendable (Update) throws -> Void {
        { update in
            try #require(try update.fetch(Person.self, %"name" == "Monk")).age = age
            try update.commit()
        }
    }

    /// An update that sets Monk's age to `age` and makes a person named "refused", which the
    /// writer of a store from `viewRefusingWrites` refuses: the whole commit fails.
    static func refusedCommit(age: Int) -> @Sendable (Update) throws -> Void {
        { update in
            try #require(try update.fetch(Person.self, %"name" == "Monk")).age = age
            try update.create(Person.self).name = "refused"
            try update.commit()
        }
    }

    /// Commits Monk at 70, then at 99 with a refused person (the writer held, so both wait),
    /// pins `quiet`'s view on them, and commits Monk at 50 after: the view's Monk, at 99.
    @MainActor static func agedThenRefusedThenShown(in quiet: MainContext) throws -> Person {
        try quiet.beginUpdateAndWait(monkAged(70))
        try quiet.beginUpdateAndWait(refusedCommit(age: 99))
        quiet.reset()
        let monk = try #require(try quiet.fetch(Person.self, %"name" == "Monk"))
        #expect(monk.age == 99, "the view shows the commits as queued")
        try quiet.beginUpdateAndWait(monkAged(50))
        return monk
    }

    /// Waits until the writer of `store` has taken every commit queued (it then waits for the
    /// writer the test holds): what is committed next is written in a transaction of its own.
    static func untilTheWriterTookTheQueue(of store: TestStore) throws {
        let queued = try #require(store.stack.store as? any QueuedStore)
        for _ in 0..<60_000 where !queued.state.withLock({ $0.queue.isEmpty }) { usleep(1_000) }
        try #require(queued.state.withLock { $0.queue.isEmpty }, "the writer took the queued commits")
    }

    /// Two commits the view showed changed Monk's age, and both fail, in two transactions.
    /// Once the second fails the view shows the stored age, not the first commit's — the age
    /// the second's context started from. Before, the view kept showing 99.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aViewShowsTheStoredValueOnceTheCommitsItShowedFailInTwoTransactions(kind: StoreKind) async throws {
        let (store, quiet) = try await Self.viewRefusingWrites(kind) { _ in }
        let monk = try store.holdingTheWriter {
            try quiet.beginUpdateAndWait(Self.refusedCommit(age: 99))
            try Self.untilTheWriterTookTheQueue(of: store)
            try quiet.beginUpdateAndWait(Self.refusedCommit(age: 80))
            quiet.reset()
            let monk = try #require(try quiet.fetch(Person.self, %"name" == "Monk"))
            #expect(monk.age == 80, "the view shows the commits as queued")
            try quiet.beginUpdateAndWait(Self.monkAged(50))
            return monk
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        await mainQueueTurn()
        #expect(try store.writtenRows("SELECT age FROM \"Person\"") == [[.integer(50)]], "the later commit is saved")
        #expect(monk.age == 63, "\(monk.age)")
        #expect(try quiet.fetchCount(Person.self, %"age" == 63) == 1)
    }

    /// The same for a join-table pair: the first commit tags the article and fails, the
    /// second untags it and fails, in two transactions; a later commit the view does not show
    /// tags it and is saved. The view shows the article untagged, as stored before them.
    /// Before, the second failure put back the pair its context started from: tagged.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aViewShowsTheStoredPairOnceTheCommitsItShowedFailInTwoTransactions(kind: StoreKind) async throws {
        let (store, quiet) = try await Self.viewRefusingWrites(kind) { update in
            try update.create(Article.self).title = "A"
            try update.create(Tag.self).name = "t"
        }
        func tagging(_ tagged: Bool, refused: Bool) -> @Sendable (Update) throws -> Void {
            { update in
                let article = try #require(try update.fetch(Article.self))
                article.tags = tagged ? [try #require(try update.fetch(Tag.self))] : []
                if refused { try update.create(Person.self).name = "refused" }
                try update.commit()
            }
        }
        let article = try store.holdingTheWriter {
            try quiet.beginUpdateAndWait(tagging(true, refused: true))
            try Self.untilTheWriterTookTheQueue(of: store)
            try quiet.beginUpdateAndWait(tagging(false, refused: true))
            quiet.reset()
            let article = try #require(try quiet.fetch(Article.self))
            #expect(article.tags.isEmpty, "the view shows the commits as queued")
            try quiet.beginUpdateAndWait(tagging(true, refused: false))
            return article
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        await mainQueueTurn()
        #expect(article.tags.isEmpty, "\(article.tags.map(\.name))")
        #expect(try quiet.fetchCount(Article.self, %"tags.@count" == 0) == 1)
        quiet.reset()
        #expect(try quiet.fetch(Article.self)?.tags.map(\.name) == ["t"], "a reset shows what is stored")
    }

    /// Images the writer takes inside its transaction — here for a batch update, queued after
    /// the view was pinned — record no stored values, and hold the values of the group's
    /// commits written before them. When the whole transaction fails (a trigger's
    /// `RAISE(ROLLBACK)` on the batch update), the view's Monk goes back to what the failed
    /// commit's context started from, the stored 63. Without that, the view kept 99.
    @Test @MainActor func aViewWhoseImageTheWriterTookShowsTheStoredValueWhenTheWholeGroupFails() async throws {
        let (store, quiet) = try await Self.viewRefusingWrites(.file) { _ in }
        let queued = store.stack.sqliteStore
        try queued.writer.withLock { writer in
            try writer.connection.execute("""
                CREATE TEMP TRIGGER "roll_back_all" BEFORE UPDATE ON main."Person" WHEN NEW.age = 1
                BEGIN SELECT RAISE(ROLLBACK, 'refused by the test, the whole transaction'); END
                """)
        }
        // The commit and the batch update are written in one transaction.
        queued.writeQueue.sync {}
        queued.writeQueue.suspend()
        try quiet.beginUpdateAndWait(Self.monkAged(99))
        quiet.reset()
        let monk = try #require(try quiet.fetch(Person.self, %"name" == "Monk"))
        #expect(monk.age == 99, "the view shows the commit as queued")
        let other = try ContextStack.Context(stack: store.stack)
        let batchDone = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = try? other.beginUpdateAndWait { update in try update.batchUpdate(Person.self, set: ["age": 1]) }
            batchDone.signal()
        }
        for _ in 0..<60_000 where queued.state.withLock({ $0.queue.count }) < 2 { usleep(1_000) }
        try #require(queued.state.withLock { $0.queue.count } == 2, "the batch update is queued behind the commit")
        queued.writeQueue.resume()
        batchDone.wait()
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        await mainQueueTurn()
        #expect(try store.writtenRows("SELECT age FROM \"Person\"") == [[.integer(63)]])
        #expect(monk.age == 63, "\(monk.age)")
        #expect(try quiet.fetchCount(Person.self, %"age" == 63) == 1)
    }

    /// A view pinned on a batch update and a commit queued behind it shows the commit's age,
    /// not the batch's, and still does once both are written in one transaction: the batch
    /// images Monk for the view (as its transaction held him, 63), and the commit, written
    /// after it, brings the image to what it stored.
    @Test(arguments: StoreKind.available) @MainActor
    func aViewShowsTheCommitQueuedBehindABatchOnceTheBatchIsWritten(kind: StoreKind) async throws {
        let (store, quiet) = try await Self.viewRefusingWrites(kind) { _ in }
        let queued = try #require(store.stack.store as? any QueuedStore)
        queued.writeQueue.sync {}
        queued.writeQueue.suspend()
        let other = try ContextStack.Context(stack: store.stack)
        // A commit first, whose writer waits on the queue: the batch's caller waits for it
        // rather than writing inline.
        try quiet.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Knight"
            try update.commit()
        }
        let batchDone = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = try? other.beginUpdateAndWait { update in try update.batchUpdate(Person.self, set: ["age": 1]) }
            batchDone.signal()
        }
        for _ in 0..<60_000 where queued.state.withLock({ $0.queue.count }) < 2 { usleep(1_000) }
        try quiet.beginUpdateAndWait(Self.monkAged(99))
        try #require(queued.state.withLock { $0.queue.count } == 3, "the commit is queued behind the batch update")
        quiet.reset()
        #expect(try quiet.fetch(Person.self, %"name" == "Monk")?.age == 99, "the view shows the commit, not the batch")
        queued.writeQueue.resume()
        batchDone.wait()
        try await store.stack.flush()
        #expect(try store.writtenRows("SELECT age FROM \"Person\" WHERE name = 'Monk'") == [[.integer(99)]])
        #expect(try quiet.fetchCount(Person.self, %"age" == 99) == 1, "the view still shows what it showed")
    }

    /// In a group whose transaction fails whole after one of its commits failed alone, that
    /// commit reports its own error (here the writer's refusal of its row), the others the
    /// transaction's. Before, every commit of the group reported the transaction's error:
    /// on PostgreSQL a lost connection, which invites a retry, for a commit that had failed
    /// for a reason a retry does not mend.
    @Test @MainActor func aCommitThatFailedAloneKeepsItsErrorWhenItsGroupFailsWhole() async throws {
        let store = try TestStore(.file)
        let errors = Locked<[String]>([])
        store.stack.onError = { error in errors.withLock { $0.append("\(error)") } }
        let world = try MainContext(stack: store.stack)
        // Reserves keys now: reserving more would need the writer, which the test holds below.
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "seed"
            try update.commit()
        }
        try await store.stack.flush()
        try store.refuseWrites(ofName: "refused")
        try store.stack.sqliteStore.writer.withLock { writer in
            try writer.connection.execute("""
                CREATE TEMP TRIGGER "roll_back_all" BEFORE INSERT ON main."Person" WHEN NEW.name = 'rolls back'
                BEGIN SELECT RAISE(ROLLBACK, 'the whole transaction, by the test'); END
                """)
        }
        try store.holdingTheWriter {
            for name in ["refused", "rolls back"] {
                try world.beginUpdateAndWait { update in
                    try update.create(Person.self).name = name
                    try update.commit()
                }
            }
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        await mainQueueTurn()
        let reported = errors.withLock { $0 }
        #expect(reported.count == 2, "\(reported)")
        #expect(reported.contains { $0.contains("refused by the test") }, "\(reported)")
        #expect(reported.contains { $0.contains("the whole transaction, by the test") }, "\(reported)")
        #expect(try store.writtenScalar("SELECT count(*) FROM Person") == .integer(1))
    }

    /// Of two commits the view showed, in one transaction, the writer saves the first
    /// otherwise than queued (under `.storeTrump`, another process's age for Monk wins) and
    /// the second fails: the view shows the age saved. Before, it showed the first commit's
    /// age as queued — the one the second's context started from.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aViewShowsWhatTheWriterSavedOfACommitItShowedThoughTheNextFailed(kind: StoreKind) async throws {
        let (store, quiet, other) = try await Self.viewAndAnotherProcess(kind, policy: .storeTrump, ["Monk"])
        store.stack.onError = { _ in }
        try store.refuseWrites(ofName: "refused")
        let monk = try store.holdingTheWriter {
            let monk = try Self.agedThenRefusedThenShown(in: quiet)
            try other.beginUpdateAndWait(Self.monkAged(40))
            return monk
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        await mainQueueTurn()
        #expect(try store.writtenRows("SELECT age FROM \"Person\"") == [[.integer(40)]], "the other process's age wins")
        #expect(monk.age == 40, "\(monk.age)")
    }

    /// Of two commits the view showed, in one transaction, the first changed Monk's age and
    /// is saved, the second changed it again and fails: the view shows the first commit's age,
    /// stored with it — not the age stored when a later commit imaged Monk for the view.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aViewShowsWhatAnEarlierCommitItShowedSavedWhenALaterOneFails(kind: StoreKind) async throws {
        let (store, quiet) = try await Self.viewRefusingWrites(kind) { _ in }
        let monk = try store.holdingTheWriter {
            let monk = try Self.agedThenRefusedThenShown(in: quiet)
            return monk
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        await mainQueueTurn()
        #expect(try store.writtenRows("SELECT age FROM \"Person\"") == [[.integer(50)]], "the later commit is saved")
        #expect(monk.age == 70, "\(monk.age)")
    }

    /// The same view, for a commit the writer saves otherwise than queued: under `.storeTrump`
    /// another process's name for Monk, saved while the commit waited, wins over the commit's.
    /// The view showed the commit's name; it shows the saved one once the commit is written.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aMainContextThatDoesNotMergeShowsACommitItsViewShowedAsTheWriterSavedIt(kind: StoreKind) async throws {
        let (store, quiet, other) = try await Self.viewAndAnotherProcess(kind, policy: .storeTrump, ["Monk"])
        let monk = try store.holdingTheWriter {
            try quiet.beginUpdateAndWait { update in
                let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
                (monk.name, monk.age) = ("Abbot", 70)
                try update.commit()
            }
            try other.beginUpdateAndWait { update in
                try #require(try update.fetch(Person.self, %"name" == "Monk")).name = "Brother"
                try update.commit()
            }
            quiet.reset()
            let monk = try #require(try quiet.fetch(Person.self, %"age" == 70))
            #expect(monk.name == "Abbot", "the view shows the commit as queued")
            return monk
        }
        try await store.stack.flush()
        await mainQueueTurn()
        #expect(try store.writtenRows("SELECT name, age FROM \"Person\"") == [[.text("Brother"), .integer(70)]])
        #expect(monk.name == "Brother" && monk.age == 70, "\(monk.name) \(monk.age)")
    }

    /// The same, for what the writer's delete rules add to a commit: another process made
    /// Abbot Monk's friend after the commit deleting Monk was queued, so the writer clears
    /// Abbot's reference as it writes the delete. A view pinned while the commit waited hears
    /// that correction, and its reads of Abbot agree with it: no reference to the deleted Monk.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aMainContextThatDoesNotMergeShowsWhatTheWritersDeleteRulesDidToACommitItsViewShowed(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let quiet = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        try quiet.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Monk"
            try update.create(Person.self).name = "Abbot"
            try update.commit()
        }
        try await store.stack.flush()
        let other = try Context(stack: try store.reopen(), updateTarget: .persistentStore)
        try store.holdingTheWriter {
            try quiet.beginUpdateAndWait { update in
                try update.delete(try #require(try update.fetch(Person.self, %"name" == "Monk")))
                try update.commit()
            }
            quiet.reset()
            #expect(try quiet.fetchAll(Person.self).map(\.name) == ["Abbot"], "the view shows the delete as queued")
            try other.beginUpdateAndWait(Self.abbotBefriends("Monk"))
        }
        try await store.stack.flush()
        await mainQueueTurn()
        #expect(try store.writtenRows("SELECT name, friend FROM \"Person\"") == [[.text("Abbot"), .null]])
        #expect(try quiet.fetchCount(Person.self, %"friend" != nil) == 0)
        let abbot = try #require(try quiet.fetch(Person.self, %"name" == "Abbot"))
        #expect(abbot.friend == nil)
    }

    /// The same when a later commit, which the view does not show, changed Abbot's reference
    /// too while the delete waited: it recorded Abbot for the view with the reference to Monk
    /// the other process made, and the view read that over the writer's correction.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aViewShowsTheWritersCorrectionThoughALaterCommitRecordedTheSameValue(kind: StoreKind) async throws {
        let (store, quiet, other) = try await Self.viewAndAnotherProcess(kind, ["Monk", "Abbot", "Knight"])
        try store.holdingTheWriter {
            try quiet.beginUpdateAndWait { update in
                try update.delete(try #require(try update.fetch(Person.self, %"name" == "Monk")))
                try update.commit()
            }
            quiet.reset()
            try other.beginUpdateAndWait(Self.abbotBefriends("Monk"))
            try quiet.beginUpdateAndWait(Self.abbotBefriends("Knight"))
        }
        try await store.stack.flush()
        await mainQueueTurn()
        #expect(try store.writtenRows("SELECT count(*) FROM \"Person\" WHERE friend IS NOT NULL") == [[.integer(1)]], "Knight, the later commit's")
        #expect(try quiet.fetchCount(Person.self, %"friend" != nil) == 0, "the view shows the delete as saved, not the later commit")
        #expect(try quiet.fetch(Person.self, %"name" == "Abbot")?.friend == nil)
        quiet.reset()
        #expect(try quiet.fetch(Person.self, %"name" == "Abbot")?.friend?.name == "Knight")
    }

    /// A deletion handed to a merging main context before the root wrote it, whose write then
    /// fails, is undone there too: the object the app holds is no longer deleted, shows what
    /// is stored, is still the context's object for its ID, and its observer hears it is back.
    @Test(arguments: mergingTargets) @MainActor
    func aFailedDeleteIsUndoneInMergingMainContexts(target: UpdateTarget) async throws {
        let (store, recorder, world, monk) = try await Self.aStoredMonk(target)
        var heard: [ObjectChange] = []
        let watch = world.observe(monk) { heard.append($0) }
        try store.stack.sqliteStore.writer.withLock { writer in
            try writer.connection.execute("""
                CREATE TEMP TRIGGER "refuse_delete" BEFORE DELETE ON main."Person"
                BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
                """)
        }
        // The deletion is shown before the root writes it: the test holds the writer until then.
        try store.stack.sqliteStore.writer.withLock { _ in
            try world.beginUpdateAndWait { update in
                try update.delete(update.use(monk))
                try update.commit()
            }
            #expect(monk.isDeleted)
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        _ = try world.fetchCount(Pet.self)    // a read applies the undoing commit
        await mainQueueTurn()
        #expect(!monk.isDeleted && monk.name == "Monk" && monk.age == 63)
        #expect(try world.fetch(Person.self, id: monk.objectID) === monk)
        #expect(try world.fetch(Person.self, %"name" == "Monk") === monk)
        #expect(heard.map(\.isDeleted) == [true, false])
        // Every key (Docs/Concurrency.md), the attributes and the relationships alike.
        #expect(Set(heard.last?.changedKeys ?? []) == Set(["name", "age", "location", "email", "friend", "friendOf", "pets"]),
                "\(heard.last?.changedKeys ?? [])")
        #expect(recorder.all.count == 1)
        withExtendedLifetime(watch) {}
    }

    /// The same for an object held as a fault that fires after the deletion was handed over
    /// and before the main context applied it: the fault finds the row gone and the object
    /// deleted, and when the deletion's write fails, the object comes back (it stayed deleted,
    /// and the context made a second object for its ID).
    @Test(arguments: mergingTargets) @MainActor
    func aFaultThatFoundADeletionWhoseSaveFailedComesBack(target: UpdateTarget) async throws {
        let (store, _, world, _) = try await Self.aStoredMonk(target)
        world.reset()
        let monk = try #require(try world.fetchAll(Person.self, options: .noPropertyValues).first)
        #expect(monk.isFault)
        try store.stack.sqliteStore.writer.withLock { writer in
            try writer.connection.execute("""
                CREATE TEMP TRIGGER "refuse_delete" BEFORE DELETE ON main."Person"
                BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
                """)
        }
        let id = monk.objectID
        store.stack.sqliteStore.writer.withLock { _ in
            // Committed on another thread while the main actor waits: handed over, not applied.
            let committed = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                try? world.beginUpdateAndWait { update in
                    try update.delete(#require(try update.fetch(Person.self, id: id)))
                    try update.commit()
                }
                committed.signal()
            }
            #expect(committed.wait(timeout: .now() + 60) == .success)
            #expect(monk.name == "")    // the fault fires: the row is gone, defaults
            #expect(monk.isDeleted)
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        _ = try world.fetchCount(Pet.self)    // a read applies the undoing commit
        await mainQueueTurn()
        #expect(!monk.isDeleted && monk.name == "Monk" && monk.age == 63)
        #expect(try world.fetch(Person.self, id: id) === monk)
    }

    /// An object of a `.propertiesOnly` fetch whose row is gone when it loads the rest reads
    /// the entity's defaults in the slots it had not loaded (Docs/Queries.md, "Faults"). Here
    /// in a long-lived update, which reads the store as it is now.
    @Test @MainActor func aPartlyLoadedObjectWhoseRowIsGoneReadsDefaults() async throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let sample = try update.create(Sample.self)
            (sample.int, sample.string, sample.optionalInt) = (7, "stored", 3)
            try update.commit()
        }
        try await store.stack.flush()
        let context = world.beginUpdateContext()
        var held: Sample?
        try context.performAndWait { update in
            held = try update.fetchAll(Sample.self, options: .propertiesOnly(["int"])).first
        }
        let writer = try Context(stack: store.stack, updateTarget: .persistentStore)
        try writer.beginUpdateAndWait { update in
            try update.deleteAll(Sample.self)
            try update.commit()
        }
        try context.performAndWait { _ in
            let sample = try #require(held)
            #expect(sample.int == 7)
            #expect(sample.string == "default")    // loads the rest: the row is gone
            #expect(sample.isDeleted)
            #expect(sample.optionalInt == nil && sample.int == 7)
        }
    }

    /// A commit that reported failing though the server saved it — its connection broke while
    /// the server ran its `COMMIT` (Docs/Postgres.md, "Faults") — left its objects among those
    /// never stored, and every later commit changing them was refused with
    /// `.dependsOnFailedCommit` for as long as the process ran. The writer now looks for their
    /// rows first: found, the commit is written and the objects are no longer taken for never
    /// stored. (The failure is simulated: the stored object is marked as a failed commit's.)
    @Test(arguments: [StoreKind.file] + StoreKind.available.filter { $0 == .postgres })
    func anObjectOfAFailedCommitFoundStoredAfterAllCanBeChanged(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = try ContextStack.Context(stack: store.stack, updateTarget: .persistentStore)
        let ann = try context.beginUpdateAndWait { update in
            let ann = try update.create(Person.self)
            (ann.name, ann.age) = ("Ann", 30)
            try update.commit()
            return ann.objectID
        }
        #expect(store.failedInserts(adding: [ann]) == [ann])
        try context.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: ann)).age = 31
            try update.commit()
        }
        #expect(store.failedInserts().isEmpty)
        #expect(try store.writtenRows("SELECT name, age FROM \"Person\"") == [[.text("Ann"), .integer(31)]])
        // One whose row is not there is still refused: the tests of dependent commits below.
    }

    /// How commits queued behind a failing one meet the writer: in the same group (the write
    /// queue held until all are queued); in one group after the failed commit's own (the
    /// writer held once it took the first); or alone after it (one dependent commit queued
    /// while the first is being written).
    enum Grouping: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case sameGroup, laterGroup, alone
        var testDescription: String { rawValue }
    }

    static let dependentCases: [(StoreKind, Grouping)] =
        ([StoreKind.file] + StoreKind.available.filter { $0 == .postgres }).flatMap { kind in Grouping.allCases.map { (kind, $0) } }

    /// Commits made while an insert was visible but not yet written, that change the inserted
    /// object or relate another to it, fail with `.dependsOnFailedCommit` when that insert's
    /// write fails. Written, the change would have updated no row, and the new pet would have
    /// pointed at an owner that was never stored. A commit that does not refer to it is saved.
    /// A context committing to the root of `store`, whose writer refuses rows named
    /// "refused"; a person and a pet named "first" are written.
    static func contextRefusingWrites(on store: TestStore) throws -> ContextStack.Context {
        try store.refuseWrites(ofName: "refused")
        let context = try ContextStack.Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        // Blocks of keys reserved beforehand: reserving one takes the writer on SQLite.
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "first"
            try update.create(Pet.self).name = "first"
            try update.commit()
        }
        try store.stack.flushAndWait()
        return context
    }

    @Test(arguments: dependentCases)
    func commitsBuiltOnAFailedInsertFailWithIt(kind: StoreKind, grouping: Grouping) throws {
        let store = try TestStore(kind)
        let queued = try #require(store.stack.store as? any QueuedStore)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let context = try Self.contextRefusingWrites(on: store)
        let batchesBefore = queued.state.withLock { $0.transactionCount }
        func commitRefused() throws -> ObjectID {
            var created: ObjectID?
            try context.beginUpdateAndWait { update in
                let person = try update.create(Person.self)
                person.name = "refused"
                created = person.objectID
                try update.commit()
            }
            return try #require(created)
        }
        func commitAge(of refused: ObjectID) throws {
            try context.beginUpdateAndWait { update in
                try #require(try update.fetch(Person.self, id: refused)).age = 40
                try update.commit()
            }
        }
        func commitPet(of refused: ObjectID) throws {
            try context.beginUpdateAndWait { update in
                let owner = try #require(try update.fetch(Person.self, id: refused))
                let pet = try update.create(Pet.self)
                pet.name = "Rex"
                pet.owner = owner
                try update.commit()
            }
        }
        func commitAda() throws {
            try context.beginUpdateAndWait { update in
                try update.create(Person.self).name = "Ada"
                try update.commit()
            }
        }
        /// Until the writer took the first commit off the queue (and waits for the held writer).
        func waitUntilTaken() throws {
            for _ in 0..<60_000 where !queued.state.withLock({ $0.queue.isEmpty }) { usleep(1_000) }
            try #require(queued.state.withLock { $0.queue.isEmpty })
        }
        let refused: ObjectID
        switch grouping {
        case .sameGroup:
            // The drain that wrote the fixture may still be running: a commit handed over
            // meanwhile would be taken by it, suspended queue or not.
            queued.writeQueue.sync {}
            queued.writeQueue.suspend()
            defer { queued.writeQueue.resume() }
            refused = try commitRefused()
            try commitAge(of: refused)
            try commitPet(of: refused)
            try commitAda()
        case .laterGroup:
            refused = try store.holdingTheWriter {
                let refused = try commitRefused()
                try waitUntilTaken()
                try commitAge(of: refused)
                try commitPet(of: refused)
                try commitAda()
                return refused
            }
        case .alone:
            refused = try store.holdingTheWriter {
                let refused = try commitRefused()
                try waitUntilTaken()
                try commitAge(of: refused)
                return refused
            }
            #expect(throws: (any Error).self) { try store.stack.flushAndWait() }
            try commitAda()
        }
        if grouping == .alone {
            try store.stack.flushAndWait()  // the failures went to the flush before
        } else {
            #expect(throws: (any Error).self) { try store.stack.flushAndWait() }
        }
        let errors = recorder.all
        let dependentCommits = grouping == .alone ? 1 : 2
        #expect(errors.count == 1 + dependentCommits, "\(errors)")
        #expect(errors.contains(where: TestStore.isRefusal), "\(errors)")
        let dependents = errors.compactMap { $0 as? SaveError }.filter { $0.code == .dependsOnFailedCommit }
        #expect(dependents.count == dependentCommits && dependents.allSatisfy { $0.objects == [refused] }, "\(errors)")
        #expect(try store.writtenRows("SELECT name, age FROM \"Person\" ORDER BY name")
                == [[.text("Ada"), .integer(0)], [.text("first"), .integer(0)]])
        #expect(try store.writtenRows("SELECT name FROM \"Pet\" ORDER BY name") == [[.text("first")]])
        // The groups the writer made: all in one; the first, then the rest; the first, the
        // dependent one, then Ada's.
        let batches = queued.state.withLock { $0.transactionCount } - batchesBefore
        #expect(batches == [Grouping.sameGroup: 1, .laterGroup: 2, .alone: 3][grouping])
    }

    /// Docs/Concurrency.md, "Errors in the background": a commit that adds a many-to-many pair
    /// with an object whose insert failed fails with it (`.dependsOnFailedCommit`, naming the
    /// object), and neither its article nor the pair is written.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func aManyToManyPairWithAFailedInsertFailsWithIt(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        try store.refuseWrites(ofName: "refused", in: "Tag")
        let context = try ContextStack.Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        // Blocks of keys reserved beforehand: reserving one takes the writer on SQLite.
        try context.beginUpdateAndWait { update in
            try update.create(Article.self).title = "first"
            try update.create(Tag.self).name = "first"
            try update.commit()
        }
        try store.stack.flushAndWait()
        let refused = try store.withWriterQueueSuspended {
            let refused = try context.beginUpdateAndWait { update in
                let tag = try update.create(Tag.self)
                tag.name = "refused"
                try update.commit()
                return tag.objectID
            }
            try context.beginUpdateAndWait { update in
                let article = try update.create(Article.self)
                article.title = "tagged"
                article.tags = [try #require(try update.fetch(Tag.self, id: refused))]
                try update.commit()
            }
            return refused
        }
        #expect(throws: (any Error).self) { try store.stack.flushAndWait() }
        let errors = recorder.all
        #expect(errors.count == 2 && errors.contains(where: TestStore.isRefusal), "\(errors)")
        let dependents = errors.compactMap { $0 as? SaveError }.filter { $0.code == .dependsOnFailedCommit }
        #expect(dependents.count == 1 && dependents.first?.objects == [refused], "\(errors)")
        #expect(try store.writtenRows("SELECT title FROM \"Article\" ORDER BY title") == [[.text("first")]])
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Z_Article_tags_Tag_articles\"") == .integer(0))
    }

    /// On PostgreSQL a commit written alone waits for other transactions' locks at most 50 ms
    /// (then it is written again patiently, outside the state lock); a group must not, or a
    /// commit of it waiting for another process's insert on a unique index would fail alone
    /// with 55P03 instead of waiting. A group whose first statement is the writer's look at
    /// whether a failed insert is stored after all (its commits only insert) took the bound.
    @Test func aGroupOfCommitsWaitsForOtherTransactionsLocksWithoutTheBoundOfACommitAlone() throws {
        guard StoreKind.available.contains(.postgres) else { return }
        let store = try TestStore(.postgres)
        store.stack.onError = { _ in }
        let context = try Self.contextRefusingWrites(on: store)
        let queued = try #require(store.stack.store as? any QueuedStore)
        let bounded = Locked<[String]>([])
        let transactions = Locked(0)
        store.stack.trace { sql in
            if sql.hasPrefix("BEGIN ISOLATION LEVEL READ COMMITTED") { transactions.withLock { $0 += 1 } }
            // The writer's bound; reads under the state lock carry one in their `BEGIN`.
            if sql.hasPrefix("SET LOCAL lock_timeout") { bounded.withLock { $0.append(sql) } }
        }
        defer { store.stack.trace(nil) }
        try store.holdingTheWriter {
            let refused = try context.beginUpdateAndWait { update in
                let person = try update.create(Person.self)
                person.name = "refused"
                try update.commit()
                return person.objectID
            }
            for _ in 0..<60_000 where !queued.state.withLock({ $0.queue.isEmpty }) { usleep(1_000) }
            try #require(queued.state.withLock { $0.queue.isEmpty }, "the writer took the refused commit alone")
            try context.beginUpdateAndWait { update in
                let pet = try update.create(Pet.self)
                (pet.name, pet.owner) = ("Rex", try update.fetch(Person.self, id: refused))
                try update.commit()
            }
            try context.beginUpdateAndWait { update in
                try update.create(Person.self).name = "Ada"
                try update.commit()
            }
        }
        #expect(throws: (any Error).self) { try store.stack.flushAndWait() }
        #expect(transactions.withLock { $0 } == 2, "the refused commit alone, then the group")
        #expect(bounded.withLock { $0.count } == 1, "the commit alone only: \(bounded.withLock { $0 })")
        #expect(try store.writtenRows("SELECT name FROM \"Person\" ORDER BY name") == [[.text("Ada")], [.text("first")]])
    }

    /// An update context that deleted an object and committed, whose deletion the root then
    /// failed to save: its next read finds the row again and gives back the object it holds,
    /// no longer deleted, not a second object for the ID.
    @Test func anUpdateContextWhoseDeletionFailedGivesBackTheSameObject() throws {
        let store = try TestStore(.file)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        let updater = context.beginUpdateContext()
        let ann = try updater.performAndWait { update in
            let ann = try update.create(Person.self)
            ann.name = "Ann"
            try update.commit()
            return ann.objectID
        }
        try store.stack.flushAndWait()
        try store.stack.sqliteStore.writer.withLock { writer in
            try writer.connection.execute("""
                CREATE TEMP TRIGGER "refuse_delete" BEFORE DELETE ON main."Person"
                BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
                """)
        }
        try updater.performAndWait { update in
            let held = try #require(try update.fetch(Person.self, id: ann))
            try update.delete(held)
            try update.commit()
            #expect(held.isDeleted)
            #expect(throws: (any Error).self) { try store.stack.flushAndWait() }
            let again = try #require(try update.fetch(Person.self, id: ann))
            #expect(again === held && !held.isDeleted && held.name == "Ann")
        }
        #expect(recorder.all.count == 1)
    }

    /// Objects fetched as faults (`.batch`), one of which another context deletes before its
    /// fault fires: the app cannot know (`isDeleted` does not fire a fault; the property
    /// access that fires it finds the object deleted), so changing it is not a misuse. The
    /// change is not kept and the update's commit throws `MergeConflictError` (`<deleted>`),
    /// as a commit changing a row another context deleted does. Before, the setter trapped
    /// ("is deleted in this update").
    @Test(arguments: StoreKind.available)
    func changingAFaultWhoseRowAnotherContextDeletedFailsTheCommitWithoutTrapping(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = try Context(stack: store.stack)
        try context.beginUpdateAndWait { update in
            for name in ["Ann", "Bob", "Cy"] { try update.create(Person.self).name = name }
            try update.commit()
        }
        try store.stack.flushAndWait()
        let updater = context.beginUpdateContext()
        let conflict = try #require(throws: MergeConflictError.self) {
            try updater.performAndWait { update in
                let people = try update.fetchAll(Person.self, orderBy: .ascending("name"), options: .batch(100))
                try Context(stack: store.stack, updateTarget: .persistentStore).beginUpdateAndWait { other in
                    try other.delete(#require(try other.fetch(Person.self, %"name" == "Bob")))
                    try other.commit()
                }
                // Bob first: the read of his age fires the faults' group.
                let bob = people[1]
                #expect(!bob.isDeleted, "not known before the fault fires")
                bob.age += 1
                #expect(people.map(\.isDeleted) == [false, true, false])
                #expect(bob.age == 0, "the change is not made")
                try update.commit()
            }
        }
        #expect(conflict.conflicts.map(\.key) == ["<deleted>"])
        #expect(conflict.description.contains("another commit deleted"), "\(conflict)")
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT \"name\", \"age\" FROM \"Person\" ORDER BY \"name\"")
                == [[.text("Ann"), .integer(0)], [.text("Cy"), .integer(0)]])
    }

    /// The same when the use that finds the object deleted relates it: neither relating
    /// another object to it (its key read for the link fires its fault) nor relating an object
    /// to one found deleted changes anything, and the commit fails the same way. Before,
    /// `ann.pets` taking a Rex whose row was gone wrote Ann into Rex's values and committed
    /// without the relation; `rex.owner = bob`, for a Bob found deleted, was made in memory;
    /// and `tom.owner = cid`, for a Cid whose fault had not fired, was made in memory and left
    /// to the writer to refuse (an owner's side of the link is a to-many list, so no key of
    /// Cid's was read).
    @Test(arguments: StoreKind.available)
    func relatingAFaultWhoseRowAnotherContextDeletedChangesNothingAndFailsTheCommit(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = try Context(stack: store.stack)
        try context.beginUpdateAndWait { update in
            for name in ["Ann", "Bob", "Cid"] { try update.create(Person.self).name = name }
            for name in ["Rex", "Tom"] { try update.create(Pet.self).name = name }
            try update.commit()
        }
        try store.stack.flushAndWait()
        func deleteElsewhere<T: ManagedObject>(_ type: T.Type, named name: String) throws {
            try Context(stack: store.stack, updateTarget: .persistentStore).beginUpdateAndWait { other in
                try other.delete(#require(try other.fetch(type, %"name" == name)))
                try other.commit()
            }
        }
        let updater = context.beginUpdateContext()
        let conflict = try #require(throws: MergeConflictError.self) {
            try updater.performAndWait { update in
                let ann = try #require(try update.fetch(Person.self, %"name" == "Ann"))
                #expect(ann.pets.isEmpty)
                let pets = try update.fetchAll(Pet.self, orderBy: .ascending("name"), options: .batch(100))
                let tom = pets[1]
                let bob = try #require(try update.fetchAll(Person.self, %"name" == "Bob", options: .batch(100)).first)
                let cid = try #require(try update.fetchAll(Person.self, %"name" == "Cid", options: .batch(100)).first)
                try deleteElsewhere(Pet.self, named: "Rex")
                try deleteElsewhere(Person.self, named: "Bob")
                try deleteElsewhere(Person.self, named: "Cid")
                // Rex's fault fires when Ann takes him: his key is read to link him.
                let rex = pets[0]
                #expect(!rex.isDeleted, "not known before the fault fires")
                ann.pets = ann.pets.union([rex])
                #expect(rex.isDeleted && rex.owner == nil, "Rex is not given to Ann")
                #expect(ann.pets.isEmpty)
                // Bob found deleted first (his fault fired by a read), then related: refused.
                _ = bob.name
                #expect(bob.isDeleted)
                tom.owner = bob
                #expect(tom.owner == nil, "Tom is not given to Bob")
                // Cid's fault fires when Tom is given to him.
                #expect(!cid.isDeleted, "not known before the fault fires")
                tom.owner = cid
                #expect(cid.isDeleted && tom.owner == nil, "Tom is not given to Cid")
                try update.commit()
            }
        }
        #expect(conflict.conflicts.map(\.key) == ["<deleted>"])
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT \"name\", \"owner\" FROM \"Pet\"") == [[.text("Tom"), .null]])
    }

    /// A commit of a group whose failure made SQLite roll the whole transaction back (here a
    /// trigger's `RAISE(ROLLBACK)`; a full disk or an I/O error does the same): every commit of
    /// the group fails with that error, and none is stored. Before, the group's `ROLLBACK TO`
    /// its savepoint failed ("no such savepoint"), and that was the error every commit got.
    @Test func aFailureThatRollsTheWholeGroupBackIsTheErrorItsCommitsGet() throws {
        let store = try TestStore(.file)
        let queued = store.stack.sqliteStore
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        try queued.writer.withLock { writer in
            try writer.connection.execute("""
                CREATE TEMP TRIGGER "roll_back_all" BEFORE INSERT ON main."Person" WHEN NEW.name = 'refused'
                BEGIN SELECT RAISE(ROLLBACK, 'refused by the test, the whole transaction'); END
                """)
        }
        let context = try ContextStack.Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        queued.writeQueue.sync {}
        queued.writeQueue.suspend()
        for name in ["Ada", "refused", "Bea"] {
            try context.beginUpdateAndWait { update in
                try update.create(Person.self).name = name
                try update.commit()
            }
        }
        queued.writeQueue.resume()
        #expect(throws: (any Error).self) { try store.stack.flushAndWait() }
        let errors = recorder.all
        #expect(errors.count == 3 && errors.allSatisfy(TestStore.isRefusal), "\(errors)")
        #expect(try store.writtenRows("SELECT name FROM \"Person\"").isEmpty)
        // The writer goes on.
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Cy"
            try update.commit()
        }
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT name FROM \"Person\"") == [[.text("Cy")]])
    }

    /// A delete whose rule clears the to-one of an object whose visible insert failed does not
    /// depend on that object: the delete is saved. (The update it makes of that object changes
    /// no row, and needs none.)
    @Test(arguments: [StoreKind.file] + StoreKind.available.filter { $0 == .postgres })
    func aDeleteThatClearsAFailedInsertsReferenceIsSaved(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        try store.refuseWrites(ofName: "refused")
        let context = try ContextStack.Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        let friend = try context.beginUpdateAndWait { update -> ObjectID in
            let friend = try update.create(Person.self)
            friend.name = "friend"
            try update.commit()
            return friend.objectID
        }
        try store.stack.flushAndWait()
        try store.holdingTheWriter {
            try context.beginUpdateAndWait { update in
                let person = try update.create(Person.self)
                let stored = try #require(try update.fetch(Person.self, id: friend))
                person.name = "refused"
                person.friend = stored
                try update.commit()
            }
            // `friendOf` nullifies: deleting the friend clears the refused person's `friend`.
            try context.beginUpdateAndWait { update in
                try update.delete(try #require(try update.fetch(Person.self, id: friend)))
                try update.commit()
            }
        }
        #expect(throws: (any Error).self) { try store.stack.flushAndWait() }
        #expect(recorder.all.count == 1 && recorder.all.allSatisfy(TestStore.isRefusal), "\(recorder.all)")
        #expect(try store.writtenRows("SELECT name FROM \"Person\"") == [])
    }
}
