@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// `FetchedResults`, object observation and fetch streams, one behaviour at a time.
@Suite(.timeLimit(.minutes(5))) struct ObservationTests {
    /// A commit that changes only a many-to-many relationship reports both objects as
    /// updated, under their relationships' names.
    @Test(arguments: Setup.all) @MainActor func aManyToManyChangeIsReportedOnBothSides(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let (article, tag) = try await harness.write { update in
            let article = try update.create(Article.self)
            let tag = try update.create(Tag.self)
            try update.commit()
            return (article.objectID, tag.objectID)
        }
        let commits = Locked<[Commit]>([])
        let token = harness.observeCommit { commit in commits.withLock { $0.append(commit) } }
        try harness.update { update in
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

    /// Five people in three places (one nowhere), written the way `setup` writes.
    static func addPeople(_ update: Update) throws {
        for (name, age, location) in [("Farmer", 28, "Oslo"), ("Knight", 18, "Rome"), ("Monk", 63, "Oslo"),
                                      ("Warrior", 35, nil), ("Child", 8, "Rome")] as [(String, Int, String?)] {
            let person = try update.create(Person.self)
            (person.name, person.age, person.location) = (name, age, location)
        }
        try update.commit()
    }

    /// The five people on `setup`, shown by its main context.
    @MainActor static func world(_ setup: Setup) async throws -> TopologyHarness {
        let harness = try TopologyHarness(setup)
        try await harness.write(addPeople)
        return harness
    }

    /// The five people in a three-tier world over memory, for the exit tests.
    @MainActor static func world() throws -> (TestStore, MainContext) {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait(addPeople)
        return (store, world)
    }

    @Test(arguments: Setup.all) @MainActor func sectionsFollowTheSectionKeyAndTheOrder(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        let results = try FetchedResults(context: world, Person.self, %"age" > 10,
                                         orderBy: .ascending("location") | .ascending("name"), sectionBy: %"location")
        #expect(results.sections.map(\.name) == [nil, "Oslo", "Rome"])
        #expect(results.sections.map { $0.objects.map(\.name) } == [["Warrior"], ["Farmer", "Monk"], ["Knight"]])
        #expect(results.sections[0].value == .null)
        let monk = results.object(at: IndexPath(item: 1, section: 1))
        #expect(monk.name == "Monk")
        #expect(results.indexPath(for: monk) == IndexPath(item: 1, section: 1))
        let child = try #require(try world.fetch(Person.self, %"name" == "Child"))
        #expect(results.indexPath(for: child) == nil)
        #expect(results.count == 4)
        _ = store
    }

    @Test(arguments: Setup.all) @MainActor func withoutSectionByThereIsAlwaysOneSection(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        let none = try FetchedResults(context: world, Person.self, %"age" > 100)
        #expect(none.sections.count == 1)
        #expect(none.sections[0].objects.isEmpty)
        #expect(none.sections[0].name == nil)
        let sectioned = try FetchedResults(context: world, Person.self, %"age" > 100, sectionBy: %"location")
        #expect(sectioned.sections.isEmpty)
        _ = store
    }

    @Test(arguments: Setup.all) @MainActor func anOrderWithoutTheSectionKeySortsByItFirst(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        let results = try FetchedResults(context: world, Person.self, orderBy: .descending("age"), sectionBy: %"location")
        #expect(results.sections.map(\.name) == [nil, "Oslo", "Rome"])
        #expect(results.sections[1].objects.map(\.name) == ["Monk", "Farmer"])
        _ = store
    }

    @Test(arguments: Setup.all) @MainActor func sectionByMustBeAnOwnAttribute(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        #expect(throws: QueryError.self) { try FetchedResults(context: world, Person.self, sectionBy: %"friend.name") }
        #expect(throws: QueryError.self) { try FetchedResults(context: world, Person.self, sectionBy: %"friend") }
        #expect(throws: QueryError.self) { try FetchedResults(context: world, Person.self, sectionBy: %"nothing") }
        _ = store
    }

    /// Observation.md's list of section names: each attribute type's stored value as text,
    /// `nil` for NULL, on every store; and `sectionBy:` on a `Decimal` throws `.unsupported`.
    @Test(arguments: StoreKind.available) @MainActor func aSectionIsNamedByItsStoredValueAsText(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let sample = try update.create(Sample.self)
            sample.flag = true
            sample.int = 42
            sample.int16 = -7
            sample.double = 3
            sample.float = 0.1
            sample.string = "Oslo"
            sample.date = Date(timeIntervalSince1970: 1_704_067_200)
            sample.data = Data([1, 2, 3, 250])
            sample.uuid = UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!
            sample.url = URL(string: "https://example.org/a")!
            sample.mood = .grumpy
            sample.level = .high
            try update.commit()
        }
        let uuidBytes = Data([0xE6, 0x21, 0xE1, 0xF8, 0xC3, 0x6C, 0x49, 0x5A, 0x93, 0xFC, 0x0C, 0x24, 0x7A, 0x3E, 0x6E, 0x5F])
        let expected: [(key: String, name: String?)] = [
            ("flag", "1"), ("int", "42"), ("int16", "-7"), ("double", "3.0"), ("float", "0.10000000149011612"),
            ("string", "Oslo"), ("date", "1704067200.0"), ("data", Data([1, 2, 3, 250]).base64EncodedString()),
            ("uuid", uuidBytes.base64EncodedString()), ("url", "https://example.org/a"), ("mood", "grumpy"), ("level", "2"),
            ("optionalString", nil), ("optionalDate", nil),
        ]
        for (key, name) in expected {
            let results = try FetchedResults(context: world, Sample.self, sectionBy: Key(key))
            #expect(results.sections.map(\.name) == [name], "\(key)")
        }
        do {
            _ = try FetchedResults(context: world, Sample.self, sectionBy: %"decimal")
            Issue.record("sectionBy: a Decimal was accepted")
        } catch let error as QueryError {
            #expect(error.code == .unsupported)
            #expect(error.message.contains("decimals are stored as text, whose order is not numeric"))
        }
        _ = store
    }

    /// Observation.md, "When results change": in a merging context the results take a commit
    /// before every commit observer runs for it — the stack's and the main context's (which,
    /// in these topologies, is the committing context) — so each of them already sees the
    /// results reflect the commit.
    @Test(arguments: Setup.merging) @MainActor func commitObserversFindTheResultsShowingTheirCommit(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let results = try FetchedResults(context: harness.world, Person.self, %"age" > 30, orderBy: .ascending("name"))
        var seen: [String: [String]] = [:]
        let observers = [
            harness.stack.observeCommit { _ in seen["stack"] = results.objects.map(\.name) },
            harness.world.observeCommit { _ in seen["main"] = results.objects.map(\.name) },
        ]
        var commits = harness.stack.allCommits.makeAsyncIterator()
        try harness.update { update in
            try #require(try update.fetch(Person.self, %"name" == "Farmer")).age = 31
            try update.commit()
        }
        _ = try #require(await commits.next())
        await mainQueueTurn()
        let expected = ["Farmer", "Monk", "Warrior"]
        #expect(seen == ["stack": expected, "main": expected])
        withExtendedLifetime(observers) {}
    }

    /// Observation.md: live results take `.tweak` as a fetch does (here it changes the
    /// condition, the order and the window), and accept `.batch`, `.prefetch`,
    /// `.propertiesOnly` and `.noPropertyValues`, which change nothing: every object is
    /// whole, and the results follow commits as without them.
    @Test(arguments: Setup.merging) @MainActor func liveResultsTakeATweakAndIgnoreTheLoadingOptions(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let world = harness.world
        let tweaked = try FetchedResults(context: world, Person.self, %"age" > 100, orderBy: .ascending("name"),
                                         options: .tweak { request in
                                             request.condition = %"age" > 10
                                             request.orderBy = .descending("age")
                                             request.limit = 2
                                         })
        #expect(tweaked.objects.map(\.name) == ["Monk", "Warrior"])
        let loading = try FetchedResults(context: world, Person.self, %"age" > 30, orderBy: .ascending("name"),
                                         options: .batch(1) | .prefetch(["pets"]) | .propertiesOnly(["name"]) | .noPropertyValues)
        #expect(loading.objects.map(\.name) == ["Monk", "Warrior"])
        #expect(loading.objects.allSatisfy { !$0.isFault })
        #expect(loading.objects.map(\.age) == [63, 35])
        var tweakedChanges = tweaked.changes.makeAsyncIterator()
        var loadingChanges = loading.changes.makeAsyncIterator()
        try harness.update { update in
            try #require(try update.fetch(Person.self, %"name" == "Farmer")).age = 40
            try update.commit()
        }
        _ = try #require(await tweakedChanges.next())
        _ = try #require(await loadingChanges.next())
        #expect(tweaked.objects.map(\.name) == ["Monk", "Farmer"])
        #expect(loading.objects.map(\.name) == ["Farmer", "Monk", "Warrior"])
        #expect(loading.objects.map(\.age) == [40, 63, 35])
    }

    @Test(arguments: Setup.merging) @MainActor func aCommitArrivesAsOneBatchOnTheChangesStream(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        let results = try FetchedResults(context: world, Person.self, %"age" > 10,
                                         orderBy: .ascending("location") | .ascending("name"), sectionBy: %"location")
        var changes = results.changes.makeAsyncIterator()
        try harness.update { update in
            // Knight leaves Rome (its section goes), Farmer is renamed past Monk, Zed arrives in Paris.
            try #require(try update.fetch(Person.self, %"name" == "Knight")).location = "Oslo"
            try #require(try update.fetch(Person.self, %"name" == "Farmer")).name = "Pilgrim"
            let zed = try update.create(Person.self)
            (zed.name, zed.age, zed.location) = ("Zed", 40, "Paris")
            try update.commit()
        }
        let change = try #require(await changes.next())
        #expect(results.sections.map(\.name) == [nil, "Oslo", "Paris"])
        #expect(results.sections[1].objects.map(\.name) == ["Knight", "Monk", "Pilgrim"])
        #expect(change.deletedSections == [2])
        #expect(change.insertedSections == [2])
        // Knight comes from a deleted section: an insert. Pilgrim moves past Monk; Monk stays.
        #expect(change.insertedRows == [IndexPath(item: 0, section: 1)])
        #expect(change.movedRows == [.init(from: IndexPath(item: 0, section: 1), to: IndexPath(item: 2, section: 1))])
        #expect(change.deletedRows.isEmpty && change.updatedRows.isEmpty)
        _ = store
    }

    /// Docs/Observation.md's worked example and "When results change": on the line after
    /// `beginUpdateAndWait` the objects show the commit and the live results do not yet; they
    /// follow it on a later turn of the main queue. An object's observer and a commit observer
    /// of a merging main context find the object showing the commit when they run.
    @Test @MainActor func liveResultsFollowACommitOnALaterTurnWhileObjectsShowItAtOnce() async throws {
        let (store, world) = try Self.world()
        let results = try FetchedResults(context: world, Person.self, %"age" > 10,
                                         orderBy: .ascending("location") | .ascending("name"), sectionBy: %"location")
        var changes = results.changes.makeAsyncIterator()
        let knight = try #require(results.sections.flatMap(\.objects).first { $0.name == "Knight" })
        var seenByObserver: [String?] = []
        var seenByCommitObserver: [String?] = []
        let watch = world.observe(knight) { _ in seenByObserver.append(knight.location) }
        let commits = world.observeCommit { _ in seenByCommitObserver.append(knight.location) }
        try world.beginUpdateAndWait { update in
            try update.use(knight).location = "Oslo"
            try update.commit()
        }
        #expect(knight.location == "Oslo")
        #expect(results.sections.map(\.name) == [nil, "Oslo", "Rome"], "not yet")
        _ = try #require(await changes.next())
        #expect(results.sections.map(\.name) == [nil, "Oslo"])
        await mainQueueTurn()
        #expect(seenByObserver == ["Oslo"] && seenByCommitObserver == ["Oslo"], "\(seenByObserver) \(seenByCommitObserver)")
        withExtendedLifetime((store, watch, commits)) {}
    }

    /// What an `onChange` handed over, batch by batch: the rows each inserted.
    @MainActor final class HandedOver {
        var inserted: [[IndexPath]] = []
    }

    /// Sets `results.onChange` to record each batch's inserted rows and, at the first batch,
    /// to `commit` and reset `context`; it checks that `onChange` is not entered again while
    /// it runs.
    @MainActor static func resettingAtTheFirstBatch(_ results: FetchedResults<Person>, commit: @escaping @MainActor () throws -> Void,
                                                    reset context: MainContext) -> HandedOver {
        let handed = HandedOver()
        var inside = false
        results.onChange = { change in
            #expect(!inside, "onChange is not entered again while it runs")
            inside = true
            defer { inside = false }
            handed.inserted.append(change.insertedRows)
            guard handed.inserted.count == 1 else { return }
            do { try commit() } catch { Issue.record(error) }
            context.reset()
        }
        return handed
    }

    /// An update that commits a person named Zed.
    static func commitZed(_ update: Update) throws {
        try update.create(Person.self).name = "Zed"
        try update.commit()
    }

    /// `onChange` may reset the context: the batch that reset makes waits until the one being
    /// handed over has reached `onChange` and the streams, so `onChange` is not entered again
    /// while it runs and the streams get the batches in the order they happened.
    @Test @MainActor func aResetInsideOnChangeComesAfterTheBatchBeingHandedOver() async throws {
        let store = try TestStore(.file)
        let quiet = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        let results = try FetchedResults(context: quiet, Person.self, orderBy: .ascending("name"))
        var stream = results.changes.makeAsyncIterator()
        let handed = Self.resettingAtTheFirstBatch(results, commit: { try quiet.beginUpdateAndWait(Self.commitZed) }, reset: quiet)
        try quiet.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Abe"
            try update.commit()
        }
        quiet.reset()
        #expect(results.objects.map(\.name) == ["Abe", "Zed"])
        #expect(handed.inserted == [[IndexPath(item: 0, section: 0)], [IndexPath(item: 1, section: 0)]])
        #expect(await stream.next()?.insertedRows == [IndexPath(item: 0, section: 0)], "Abe's batch first")
        #expect(await stream.next()?.insertedRows == [IndexPath(item: 1, section: 0)], "then Zed's")
    }

    /// The same in a merging (three-tier) context, whose first batch comes from a merged
    /// commit rather than a reset: the reset made inside `onChange` (after a commit the context
    /// does not merge, another context's) is handed over after the merged batch.
    @Test @MainActor func aResetInsideOnChangeOfAMergingContextComesAfterTheMergedBatch() async throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        let other = try ContextStack.Context(stack: store.stack, updateTarget: .persistentStore)
        let results = try FetchedResults(context: world, Person.self, orderBy: .ascending("name"))
        var stream = results.changes.makeAsyncIterator()
        let handed = Self.resettingAtTheFirstBatch(results, commit: { try other.beginUpdateAndWait(Self.commitZed) }, reset: world)
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Abe"
            try update.commit()
        }
        // The merged batch comes on the main actor's turn after the commit.
        #expect(await stream.next()?.insertedRows == [IndexPath(item: 0, section: 0)], "Abe's batch first")
        #expect(await stream.next()?.insertedRows == [IndexPath(item: 1, section: 0)], "then Zed's")
        // Zed's commit itself reaches the results after the reset that showed him: an update.
        let zed = await stream.next()
        #expect(zed?.insertedRows == [] && zed?.updatedRows == [IndexPath(item: 1, section: 0)], "\(String(describing: zed))")
        #expect(results.objects.map(\.name) == ["Abe", "Zed"])
        #expect(handed.inserted == [[IndexPath(item: 0, section: 0)], [IndexPath(item: 1, section: 0)], []])
    }

    @Test(arguments: Setup.merging) @MainActor func aChangeInPlaceIsAnUpdateAndAnUnrelatedEntityIsNothing(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        let results = try FetchedResults(context: world, Person.self, orderBy: .ascending("name"))
        let received = Locked<[ResultsChange]>([])
        results.onChange = { change in received.withLock { $0.append(change) } }
        // Commit observers run after live results: each sees the results' batches so far.
        let seenByObserver = Locked<[Int]>([])
        let token = harness.observeCommit { _ in
            seenByObserver.withLock { $0.append(received.withLock(\.count)) }
        }
        try harness.update { update in
            try #require(try update.fetch(Person.self, %"name" == "Farmer")).email = "farmer@example.com"
            try update.commit()
        }
        try harness.update { update in
            try update.create(Pet.self).name = "Rex"
            try update.commit()
        }
        try harness.update { update in
            try #require(try update.fetch(Person.self, %"name" == "Farmer")).age = 29
            try update.commit()
        }
        // Delivery happens on the main queue: wait for all three commits.
        var commits = store.stack.allCommits.makeAsyncIterator()
        try harness.update { update in
            try update.create(Pet.self).name = "Fido"
            try update.commit()
        }
        _ = await commits.next()
        let changes = received.withLock { $0 }
        #expect(changes.count == 2)
        #expect(changes.allSatisfy { $0.updatedRows == [IndexPath(item: 1, section: 0)] && $0.movedRows.isEmpty })
        #expect(seenByObserver.withLock { $0 } == [1, 1, 2, 2])
        withExtendedLifetime(token) {}
    }

    @Test(arguments: Setup.merging) @MainActor func anObjectFilterMakesEveryChangeAReload(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        let results = try FetchedResults(context: world, Person.self, orderBy: .ascending("name"), sectionBy: %"location",
                                         objectFilter: { $0.name.count <= 5 })
        #expect(results.sections.map { $0.objects.map(\.name) } == [["Monk"], ["Child"]])
        var changes = results.changes.makeAsyncIterator()
        try harness.update { update in
            try #require(try update.fetch(Person.self, %"name" == "Warrior")).name = "Ward"
            try update.commit()
        }
        let change = try #require(await changes.next())
        #expect(change.isReload)
        #expect(change.deletedSections == [0, 1])
        #expect(change.insertedSections == [0, 1, 2])
        #expect(results.sections.map { $0.objects.map(\.name) } == [["Ward"], ["Monk"], ["Child"]])
        _ = store
    }

    @Test(arguments: Setup.merging) @MainActor func aWindowSlidesWithTheOrder(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        let results = try FetchedResults(context: world, Person.self, orderBy: .ascending("age"), options: .offset(1) | .limit(2))
        #expect(results.objects.map(\.name) == ["Knight", "Farmer"])
        var changes = results.changes.makeAsyncIterator()
        try harness.update { update in
            let baby = try update.create(Person.self)
            (baby.name, baby.age) = ("Baby", 1)
            try update.commit()
        }
        let change = try #require(await changes.next())
        #expect(results.objects.map(\.name) == ["Child", "Knight"])
        #expect(change.insertedRows == [IndexPath(item: 0, section: 0)])
        #expect(change.deletedRows == [IndexPath(item: 1, section: 0)])
        _ = store
    }

    @Test @MainActor func aPerConsumerResetReloadsAndReportsTheDifference() async throws {
        let harness = try TopologyHarness(.perConsumer, kind: .memory)
        try harness.update { update in
            for name in ["Ann", "Bob"] { try update.create(Person.self).name = name }
            try update.commit()
        }
        try await harness.settle()
        let results = try FetchedResults(context: harness.world, Person.self, orderBy: .ascending("name"))
        var changes = results.changes.makeAsyncIterator()
        try harness.update { update in
            try update.create(Person.self).name = "Ada"
            try #require(try update.fetch(Person.self, %"name" == "Bob")).age = 7
            try update.commit()
        }
        let change = try #require(await changes.next())
        #expect(results.objects.map(\.name) == ["Ada", "Ann", "Bob"])
        #expect(results.objects.last?.age == 7)
        #expect(change.insertedRows == [IndexPath(item: 0, section: 0)])
        #expect(change.updatedRows == [IndexPath(item: 1, section: 0)])
    }

    /// A per-consumer context's results report what the commit that reset them touched, as a
    /// merging context's do: an article whose only change is a many-to-many pair is updated
    /// (its row's values are the same, so the reload alone reported nothing).
    @Test(.timeLimit(.minutes(1))) @MainActor func aPerConsumerResetReportsWhatItsCommitTouched() async throws {
        let harness = try TopologyHarness(.perConsumer, kind: .memory)
        try harness.update { update in
            try update.create(Article.self).title = "News"
            try update.create(Tag.self).name = "swift"
            try update.commit()
        }
        try await harness.settle()
        let results = try FetchedResults(context: harness.world, Article.self, orderBy: .ascending("title"))
        var changes = results.changes.makeAsyncIterator()
        try harness.update { update in
            let article = try #require(try update.fetch(Article.self))
            article.tags = [try #require(try update.fetch(Tag.self))]
            try update.commit()
        }
        let change = try #require(await changes.next())
        #expect(change.updatedRows == [IndexPath(item: 0, section: 0)], "\(change)")
    }

    @Test(arguments: Setup.merging) @MainActor func observeReportsChangedKeysThenDeletion(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        let knight = try #require(try world.fetch(Person.self, %"name" == "Knight"))
        var seen: [ObjectChange] = []
        let watch = world.observe(knight) { seen.append($0) }
        var commits = store.stack.allCommits.makeAsyncIterator()
        try harness.update { update in
            let knight = try update.use(knight)
            knight.age = 19
            knight.location = "Paris"
            try update.commit()
        }
        try harness.update { update in
            try #require(try update.fetch(Person.self, %"name" == "Monk")).age = 64
            try update.commit()
        }
        try harness.update { update in
            try update.delete(update.use(knight))
            try update.commit()
        }
        for _ in 0..<3 { _ = await commits.next() }
        #expect(seen.count == 2)
        #expect(seen.first?.changedKeys == ["age", "location"])
        #expect(seen.first?.isDeleted == false)
        #expect(seen.last?.isDeleted == true)
        #expect(seen.allSatisfy { $0.objectID == knight.objectID })
        watch.cancel()
    }

    /// Observation.md: for a commit the context does not merge (a `.persistentStore` commit,
    /// seen by a three-tier context), the held object keeps its values and `fetch(_:id:)`
    /// returns it as held; a fetch whose condition names it (`SELF == %@`) reads the row again
    /// — the new values, or nothing once the row is deleted.
    @Test(arguments: StoreKind.available) @MainActor
    func aFetchThatNamesTheObjectSeesACommitTheContextDoesNotMerge(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let id = try world.beginUpdateAndWait { update in
            let knight = try update.create(Person.self)
            (knight.name, knight.age) = ("Knight", 30)
            try update.commit()
            return knight.objectID
        }
        try await store.stack.flush()
        let knight = try #require(try world.fetch(Person.self, id: id))
        var ages: [Int?] = []
        let watch = world.observe(knight) { change in
            ages.append(try? world.fetch(Person.self, .where("SELF == %@", change.objectID))?.age)
        }
        let importer = try ContextStack.Context(stack: store.stack, updateTarget: .persistentStore)
        try importer.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: id)).age = 40
            try update.commit()
        }
        await mainQueueTurn()
        try importer.beginUpdateAndWait { update in
            try update.delete(#require(try update.fetch(Person.self, id: id)))
            try update.commit()
        }
        await mainQueueTurn()
        #expect(ages == [40, nil])
        watch.cancel()
    }

    /// Observation.md: a condition through two entities (`vault.keeper.name`) follows a change
    /// of the object in the middle — the vault's keeper changes, no pet and no coin does. Live
    /// results insert the coin, and a fetch made before the root writes the commit finds it.
    /// (The look for objects whose chain reaches a changed object gave up at the last hop,
    /// where nothing had changed.)
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aConditionThroughTwoEntitiesFollowsAChangeOfTheObjectInTheMiddle(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let (vault, tom, rex, coin) = (try update.create(Vault.self), try update.create(Pet.self), try update.create(Pet.self), try update.create(Coin.self))
            (tom.name, rex.name) = ("Tom", "Rex")
            vault.keeper = tom
            coin.vault = vault
            try update.commit()
        }
        try await store.stack.flush()
        let results = try FetchedResults(context: world, Coin.self, %"vault.keeper.name" == "Rex")
        var inserted: [IndexPath] = []
        results.onChange = { inserted += $0.insertedRows }
        #expect(results.count == 0)
        try store.holdingTheWriter {
            try world.beginUpdateAndWait { update in
                try #require(try update.fetch(Vault.self)).keeper = try update.fetch(Pet.self, %"name" == "Rex")
                try update.commit()
            }
            #expect(try world.fetchCount(Coin.self, %"vault.keeper.name" == "Rex") == 1, "before the root writes it")
            #expect(try world.fetchCount(Coin.self, %"vault.keeper.name" == "Tom") == 0)
        }
        try await store.stack.flush()
        await mainQueueTurn()
        #expect(results.count == 1)
        #expect(inserted == [IndexPath(item: 0, section: 0)])
    }

    /// Observation.md: a commit that changes nothing in the results reports nothing, also while
    /// earlier commits wait to be written. Results with a key-path condition look again at
    /// every object whose row is still on its way (the store cannot say where its path leads);
    /// those that stay where they were are not updates of the later commit. (They were all
    /// listed as updated, for every commit, until the root wrote the first.)
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aCommitThatChangesNothingInKeyPathResultsReportsNothingWhileOthersWait(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let monk = try update.create(Person.self)
            (monk.name, monk.age) = ("Monk", 30)
            try update.create(Person.self).name = "Zed"
            try update.commit()
        }
        try await store.stack.flush()
        let results = try FetchedResults(context: world, Person.self, %"friend.age" > 20, orderBy: .ascending("name"))
        var batches: [ResultsChange] = []
        results.onChange = { batches.append($0) }
        // Each commit reaches the results while the ones before wait to be written.
        let monkID = try #require(try world.fetch(Person.self, %"name" == "Monk")).objectID
        let release = try store.holdTheWriterFromOutside(locking: monkID)
        try world.beginUpdateAndWait { update in
            let monk = try #require(try update.fetch(Person.self, id: monkID))
            for name in ["Ann", "Bob", "Cy"] {
                let person = try update.create(Person.self)
                (person.name, person.friend) = (name, monk)
            }
            try update.commit()
        }
        await mainQueueTurn()
        try world.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, %"name" == "Zed")).location = "Oslo"
            try update.commit()
        }
        await mainQueueTurn()
        // The monk's age does change where the three lead: they are updated.
        try world.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: monkID)).age = 31
            try update.commit()
        }
        await mainQueueTurn()
        try release()
        try await store.stack.flush()
        await mainQueueTurn()
        #expect(results.objects.map(\.name) == ["Ann", "Bob", "Cy"])
        #expect(batches.map(\.insertedRows.count) == [3, 0], "\(batches)")
        #expect(batches.last?.updatedRows.count == 3)
    }

    /// Observation.md: a relationship change lists the side that stores it. After
    /// `rex.owner = ann`, results of pets report Rex updated; results of people report nothing,
    /// though `ann.hasChanges` was true in the update.
    @Test @MainActor func aRelationshipChangeListsTheSideThatStoresIt() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let (ann, rex) = try world.beginUpdateAndWait { update in
            let ann = try update.create(Person.self)
            let rex = try update.create(Pet.self)
            (ann.name, rex.name) = ("Ann", "Rex")
            try update.commit()
            return (ann.objectID, rex.objectID)
        }
        let people = try FetchedResults(context: world, Person.self)
        let pets = try FetchedResults(context: world, Pet.self)
        var peopleChanges: [ResultsChange] = []
        people.onChange = { peopleChanges.append($0) }
        var petChanges = pets.changes.makeAsyncIterator()
        try world.beginUpdateAndWait { update in
            let owner = try #require(try update.fetch(Person.self, id: ann))
            try #require(try update.fetch(Pet.self, id: rex)).owner = owner
            #expect(owner.hasChanges)
            try update.commit()
        }
        let petChange = try #require(await petChanges.next())
        #expect(petChange.updatedRows == [IndexPath(item: 0, section: 0)])
        #expect(peopleChanges.isEmpty)
    }

    @Test(arguments: Setup.merging) @MainActor func fetchAllStreamYieldsFreshResultsAndEndsWhenTheConsumerStops(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        let before = store.stack.commits.liveObserverCount
        var snapshots: [[String]] = []
        for await adults in world.fetchAllStream(Person.self, %"age" > 30, orderBy: .ascending("name")) {
            snapshots.append(adults.map(\.name))
            if snapshots.count == 1 {
                #expect(store.stack.commits.liveObserverCount == before + 1)
                try harness.update { update in
                    try #require(try update.fetch(Person.self, %"name" == "Farmer")).age = 31
                    try update.commit()
                }
            } else {
                break
            }
        }
        #expect(snapshots == [["Monk", "Warrior"], ["Farmer", "Monk", "Warrior"]])
        // Leaving the loop ended the stream: its results and their observation are gone.
        await mainQueueTurn()
        #expect(store.stack.commits.liveObserverCount == before)
    }

    /// Observation.md: a fetch stream also ends when its consumer's task is cancelled while it
    /// waits for the next element, and the observation behind it goes away.
    @Test(.timeLimit(.minutes(1)), arguments: Setup.merging) @MainActor
    func aFetchStreamEndsWhenItsTaskIsCancelled(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let world = harness.world
        let before = harness.stack.commits.liveObserverCount
        let (first, firstArrived) = AsyncStream.makeStream(of: Void.self)
        let consumer = Task { @MainActor in
            var elements = 0
            for await _ in world.fetchAllStream(Person.self, %"age" > 30) {
                elements += 1
                firstArrived.yield()
            }
            return elements
        }
        var arrivals = first.makeAsyncIterator()
        _ = await arrivals.next()
        #expect(harness.stack.commits.liveObserverCount == before + 1)
        consumer.cancel()
        #expect(await consumer.value == 1)
        await mainQueueTurn()
        #expect(harness.stack.commits.liveObserverCount == before)
    }

    /// A per-consumer context resets at every commit of its updater, letting every object go:
    /// a fetch stream yields the same rows as new objects then, even when nothing it shows
    /// changed, so that the consumer never holds objects of before the reset (reading one
    /// traps). (`FetchedResults` itself reports only the difference:
    /// `aPerConsumerResetReloadsAndReportsTheDifference`.)
    @Test(.timeLimit(.minutes(1)), arguments: Setup.all.filter { $0.topology == .perConsumer }) @MainActor
    func aStreamYieldsNewObjectsOnceItsContextResets(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        var adults = harness.world.fetchAllStream(Person.self, %"age" > 30, orderBy: .ascending("name")).makeAsyncIterator()
        let before = try #require(await adults.next())
        #expect(before.map(\.name) == ["Monk", "Warrior"])
        try harness.update { update in
            try update.create(Pet.self).name = "unrelated"
            try update.commit()
        }
        let after = try #require(await adults.next())
        #expect(after.map(\.name) == ["Monk", "Warrior"])
        #expect(!after.contains { object in before.contains { $0 === object } })
    }

    /// A consumer that falls behind gets the newest objects: with two commits delivered before
    /// it resumes, each resetting the context, what it gets is of after the second reset. (The
    /// element used to be made when the first reset came, and the second reset let its objects
    /// go before the consumer read them: the first use trapped.)
    @Test(.timeLimit(.minutes(1)), arguments: Setup.all.filter { $0.topology == .perConsumer }) @MainActor
    func aStreamThatFallsBehindSeveralResetsGetsTheNewestObjects(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        var adults = harness.world.fetchAllStream(Person.self, %"age" > 30, orderBy: .ascending("name")).makeAsyncIterator()
        _ = try #require(await adults.next())
        let updater = try #require(harness.updater)
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            for name in ["a", "b"] {
                try? updater.beginUpdateAndWait { update in
                    try update.create(Pet.self).name = name
                    try update.commit()
                }
            }
            done.signal()
        }
        done.wait()    // both commits' deliveries wait for the main queue, behind this test
        let after = try #require(await adults.next())
        #expect(after.map(\.name) == ["Monk", "Warrior"])
    }

    /// Observation.md: after a reset, a stream yields again only when its result holds an
    /// object: an empty result holds none the reset could let go, so a per-consumer context's
    /// reset for an unrelated commit yields nothing, and the next element is the one a commit
    /// that matches brings.
    @Test(.timeLimit(.minutes(1)), arguments: Setup.all.filter { $0.topology == .perConsumer }) @MainActor
    func anEmptyStreamIsNotYieldedAgainAfterAReset(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let world = harness.world
        let (arrivals, arrived) = AsyncStream.makeStream(of: [String].self)
        let consumer = Task { @MainActor in
            for await old in world.fetchAllStream(Person.self, %"age" > 100) { arrived.yield(old.map(\.name)) }
        }
        var elements = arrivals.makeAsyncIterator()
        #expect(await elements.next() == [])
        try harness.update { update in
            try update.create(Pet.self).name = "unrelated"
            try update.commit()
        }
        for _ in 0..<5 { await mainQueueTurn() }
        try harness.update { update in
            let old = try update.create(Person.self)
            (old.name, old.age) = ("Old", 120)
            try update.commit()
        }
        #expect(await elements.next() == ["Old"])
        consumer.cancel()
    }

    @Test(arguments: Setup.merging) @MainActor func fetchStreamFollowsTheFirstObject(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        var names: [String?] = []
        for await first in world.fetchStream(Person.self, %"location" == "Rome", orderBy: .ascending("age")) {
            names.append(first?.name)
            if names.count == 1 {
                try harness.update { update in
                    try update.delete(#require(try update.fetch(Person.self, %"name" == "Child")))
                    try update.commit()
                }
            } else {
                break
            }
        }
        #expect(names == ["Child", "Knight"])
        _ = store
    }

    @Test(arguments: Setup.all) @MainActor func aStreamWithABadConditionEndsAndReportsTheError(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        let errors = ErrorRecorder()
        store.stack.onError = { errors.record($0) }
        var count = 0
        for await _ in world.fetchAllStream(Person.self, %"nothing" == 1) { count += 1 }
        #expect(count == 0)
        #expect(errors.all.first is QueryError)
    }

    /// Docs/Observation.md, "Errors and misuse": results that could not follow a commit (the
    /// store failed to read: here its table was renamed away for the moment) report the error,
    /// keep their last contents, and refetch whole at the next commit that reaches them, so
    /// they miss nothing. Following that next commit alone would leave the first one out.
    @Test @MainActor func resultsThatFailedToFollowACommitRefetchAtTheNext() async throws {
        let store = try TestStore(.file)
        let errors = ErrorRecorder()
        store.stack.onError = { errors.record($0) }
        let world = try MainContext(stack: store.stack)
        let bob = try world.beginUpdateAndWait { update in
            let ann = try update.create(Person.self)
            (ann.name, ann.age) = ("Ann", 30)
            let bob = try update.create(Person.self)
            (bob.name, bob.age) = ("Bob", 10)
            try update.commit()
            return bob.objectID
        }
        try await store.stack.flush()
        let results = try FetchedResults(context: world, Person.self, %"age" >= 18, orderBy: .ascending("name"))
        #expect(results.objects.map(\.name) == ["Ann"])
        var changes: [ResultsChange] = []
        results.onChange = { changes.append($0) }

        // Bob comes of age while the table is away (the writer held, so that the commit waits
        // for it to come back): following the commit reads his stored row.
        let held = Locked(false)
        let release = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            try? store.holdingTheWriter {
                held.withLock { $0 = true }
                release.wait()
            }
        }
        var released = false
        defer { if !released { release.signal() } }
        while !held.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
        let raw = try store.rawConnection()
        try world.beginUpdateAndWait { update in
            let person = try #require(try update.fetch(Person.self, id: bob))
            try raw.execute("ALTER TABLE Person RENAME TO PersonAway")
            person.age = 20
            try update.commit()
        }
        await mainQueueTurn()
        try raw.execute("ALTER TABLE PersonAway RENAME TO Person")
        release.signal()
        released = true
        try await store.stack.flush()
        #expect(errors.all.count == 1, "the results' read did not fail: \(errors.all)")
        #expect(results.objects.map(\.name) == ["Ann"] && changes.isEmpty, "the results keep their last contents")

        // A commit the results could follow by itself (an insert, whose row the commit holds).
        try world.beginUpdateAndWait { update in
            let cy = try update.create(Person.self)
            (cy.name, cy.age) = ("Cy", 40)
            try update.commit()
        }
        await mainQueueTurn()
        #expect(results.objects.map(\.name) == ["Ann", "Bob", "Cy"])
        #expect(changes.map(\.insertedRows) == [[.at(0, 1), .at(0, 2)]])
    }

    /// Docs/Observation.md, "Errors and misuse": when the refetch after a context's reset
    /// fails, the results cannot keep objects the reset let go: they empty (one empty section
    /// without `sectionBy`), say so with a reload, and fetch again whole at the next reset (a
    /// context that does not merge) or at the next commit that reaches them (a merging one),
    /// reporting every row as inserted.
    @Test(arguments: [false, true]) @MainActor
    func resultsWhoseRefetchAfterAResetFailsEmptyAndSaySo(recoveredByACommit: Bool) async throws {
        let store = try TestStore(.file)
        let errors = ErrorRecorder()
        store.stack.onError = { errors.record($0) }
        let world = recoveredByACommit ? try MainContext(stack: store.stack)
            : try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        try world.beginUpdateAndWait { update in
            for name in ["Ann", "Bob"] { try update.create(Person.self).name = name }
            try update.commit()
        }
        try await store.stack.flush()
        world.reset()
        let results = try FetchedResults(context: world, Person.self, orderBy: .ascending("name"))
        #expect(results.objects.map(\.name) == ["Ann", "Bob"])
        var changes: [ResultsChange] = []
        results.onChange = { changes.append($0) }

        let raw = try store.rawConnection()
        try raw.execute("ALTER TABLE Person RENAME TO PersonAway")
        world.reset()
        #expect(errors.all.count == 1, "the refetch did not fail: \(errors.all)")
        #expect(results.sections.count == 1 && results.objects.isEmpty)
        #expect(changes.map(\.isReload) == [true])
        #expect(changes.first.map { ($0.deletedSections, $0.insertedSections) } ?? ([], []) == ([0], [0]))

        try raw.execute("ALTER TABLE PersonAway RENAME TO Person")
        var names = ["Ann", "Bob"]
        if recoveredByACommit {
            try world.beginUpdateAndWait { update in
                try update.create(Person.self).name = "Cy"
                try update.commit()
            }
            names.append("Cy")
            for _ in 0..<100 where changes.count < 2 { await mainQueueTurn() }
        } else {
            world.reset()
        }
        #expect(results.objects.map(\.name) == names)
        #expect(changes.count == 2 && changes.last?.insertedRows == names.indices.map { .at(0, $0) }, "\(changes)")
    }

    /// Commits a person named `name` through `writer` on another thread, and blocks this one
    /// until it is written (a minute at most): on the main actor, the commit's delivery waits
    /// behind what the caller does next. Whether it was written in time.
    private static func commitBlockingThisThread(_ writer: Context, named name: String) -> Bool {
        let written = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            try? writer.beginUpdateAndWait { update in
                try update.create(Person.self).name = name
                try update.commit()
            }
            written.signal()
        }
        return written.wait(timeout: .now() + 60) == .success
    }

    /// A commit that becomes visible while live results are being made — after their fetch
    /// read the store, before they were registered — reaches them: they register first. (It
    /// was delivered to nobody when no other listener existed, and the results never showed
    /// it.) Here the object filter, which runs on the main actor after the rows are read,
    /// waits for another thread's commit.
    @Test @MainActor func aCommitMadeWhileLiveResultsAreMadeReachesThem() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Ann"
            try update.commit()
        }
        let writer = try Context(stack: store.stack, updateTarget: .persistentStore)
        var armed = true
        let results = try FetchedResults(context: world, Person.self, orderBy: .ascending("name"), objectFilter: { _ in
            if armed {
                armed = false
                #expect(Self.commitBlockingThisThread(writer, named: "Bob"))
            }
            return true
        })
        await mainQueueTurn()
        await mainQueueTurn()
        #expect(results.objects.map(\.name) == ["Ann", "Bob"])
    }

    /// A commit published before live results were registered is not delivered to them, even
    /// when another listener made it be delivered at all: their fetch read it. (They used to
    /// hear of it as news whenever some other observer existed.)
    @Test @MainActor func aCommitPublishedBeforeLiveResultsWereMadeIsNotNewsToThem() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let everything = store.stack.observeCommit { _ in }    // so that the commit is published
        let writer = try Context(stack: store.stack, updateTarget: .persistentStore)
        // Blocks the main actor, so that the commit's delivery waits behind the results.
        #expect(Self.commitBlockingThisThread(writer, named: "Bob"))
        let results = try FetchedResults(context: world, Person.self, orderBy: .ascending("name"))
        var changes: [ResultsChange] = []
        results.onChange = { changes.append($0) }
        await mainQueueTurn()
        await mainQueueTurn()
        #expect(results.objects.map(\.name) == ["Bob"])
        #expect(changes.isEmpty, "\(changes)")
        _ = everything
    }

    /// A merging main context that also resets on another context's commits (allowed:
    /// Docs/Topologies.md) reports one batch for such a commit: the reset reloads its results,
    /// and they do not take the same commit in again (they reported every touched object as
    /// updated a second time, and fetch streams yielded twice).
    @Test @MainActor func aMergingContextResetForACommitReportsItOnce() async throws {
        let store = try TestStore(.memory)
        let updater = try Context(stack: store.stack, updateTarget: .persistentStore)
        let world = try MainContext(stack: store.stack, updateTarget: .mainContext, resetOnCommitOf: updater)
        let ann = try updater.beginUpdateAndWait { update in
            let ann = try update.create(Person.self)
            (ann.name, ann.age) = ("Ann", 30)
            try update.commit()
            return ann.objectID
        }
        await mainQueueTurn()
        let results = try FetchedResults(context: world, Person.self, orderBy: .ascending("name"))
        var changes: [ResultsChange] = []
        results.onChange = { changes.append($0) }
        try updater.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: ann)).age = 31
            try update.commit()
        }
        await mainQueueTurn()
        await mainQueueTurn()
        #expect(changes.count == 1, "\(changes)")
        #expect(results.objects.map(\.age) == [31])
    }

    /// `observe(_:)` reports an insert of its object only when it brings back an object whose
    /// deletion failed to save (`FailedSaveTests.aFailedDeleteIsUndoneInMergingMainContexts`).
    /// Here a commit made on another thread inserts Ann; the main actor, blocked until it is
    /// written, fetches and observes her before the commit is delivered to the main actor's
    /// observers: she hears nothing of her own insert.
    @Test @MainActor func anObjectObservedBeforeItsInsertIsDeliveredHearsNothingOfIt() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let writer = try Context(stack: store.stack, updateTarget: .persistentStore)
        let everything = store.stack.observeCommit { _ in }    // so that the commit is delivered
        let written = DispatchSemaphore(value: 0)
        let inserted = Locked<ObjectID?>(nil)
        Thread.detachNewThread {
            let id = try? writer.beginUpdateAndWait { update in
                let ann = try update.create(Person.self)
                ann.name = "Ann"
                try update.commit()
                return ann.objectID
            }
            inserted.withLock { $0 = id }
            written.signal()
        }
        // Blocks the main actor, so that the commit's delivery to it waits.
        #expect(written.wait(timeout: .now() + 60) == .success)
        let id = try #require(inserted.withLock { $0 })
        let ann = try #require(try world.fetch(Person.self, id: id))
        var heard: [ObjectChange] = []
        let watch = world.observe(ann) { heard.append($0) }
        await mainQueueTurn()
        await mainQueueTurn()
        #expect(heard.isEmpty, "\(heard)")
        withExtendedLifetime((watch, everything)) {}
    }

    /// Docs/Observation.md, "Object filters": the filter runs after the condition and before
    /// the window, so `.limit(2)` keeps the first two objects that pass it.
    @Test @MainActor func anObjectFilterRunsBeforeTheWindow() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for name in ["Al", "Barbara", "Cy", "Dan"] { try update.create(Person.self).name = name }
            try update.commit()
        }
        let results = try FetchedResults(context: world, Person.self, orderBy: .ascending("name"), options: .limit(2),
                                         objectFilter: { $0.name.count <= 3 })
        #expect(results.objects.map(\.name) == ["Al", "Cy"])
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Bo"
            try update.commit()
        }
        await mainQueueTurn()
        #expect(results.objects.map(\.name) == ["Al", "Bo"])
    }

    @Test(arguments: Setup.all) @MainActor func changesEndWhenTheResultsAreReleased(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        var results: FetchedResults<Person>? = try FetchedResults(context: world, Person.self)
        var changes = try #require(results).changes.makeAsyncIterator()
        let before = store.stack.commits.liveObserverCount
        results = nil
        #expect(store.stack.commits.liveObserverCount == before - 1)
        #expect(await changes.next() == nil)
    }

    @Test func observingAnObjectOfAnotherContextTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try ObservationTests.world()
                let other = try MainContext(stack: store.stack)
                let farmer = try #require(try world.fetch(Person.self, %"name" == "Farmer"))
                _ = other.observe(farmer) { _ in }
            }
        }
        expectTrapMessage(result, contains: "belongs to another context", "observe it through the MainContext it was fetched from")
    }

    @Test func objectAtOutsideTheResultsTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let (store, world) = try ObservationTests.world()
                let results = try FetchedResults(context: world, Person.self)
                _ = results.object(at: IndexPath(item: 9, section: 0))
                _ = store
            }
        }
        expectTrapMessage(result, contains: "no such object", "the results have 1 sections of [5] objects", "Check indexPath(for:")
    }

    @Test(arguments: Setup.all) @MainActor func ownOrdersUpdateInPlaceAndKeyPathOrdersOrWindowsRefetch(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let (store, world) = (harness.store, harness.world)
        #expect(try FetchedResults(context: world, Person.self, %"age" > 3 || %"name"%.beginsWith("M"),
                                   orderBy: .descending("age"), sectionBy: %"location").strategy == .incremental)
        // A condition through to-one key paths stays incremental (objects reaching a changed
        // object by their foreign keys are touched too); an order through them refetches.
        #expect(try FetchedResults(context: world, Person.self, %"friend.age" > 3 && %"friend.friend.name" != "x").strategy == .incremental)
        #expect(try FetchedResults(context: world, Person.self, %"pets.@count" > 0).strategy == .refetch)
        #expect(try FetchedResults(context: world, Person.self, orderBy: .ascending("friend.name")).strategy == .refetch)
        #expect(try FetchedResults(context: world, Person.self, options: .limit(3)).strategy == .refetch)
        #expect(try FetchedResults(context: world, Person.self, objectFilter: { _ in true }).strategy == .reload)
        _ = store
    }

    @Test(arguments: Setup.merging) @MainActor func commitsUpdateInPlaceWithoutRefetching(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            for index in 0..<500 {
                let person = try update.create(Person.self)
                (person.name, person.age, person.location) = ("P\(index)", index % 90, ["Oslo", "Rome", nil][index % 3])
            }
            try update.commit()
        }
        let results = try FetchedResults(context: world, Person.self, %"age" >= 18,
                                         orderBy: .ascending("location") | .descending("age"), sectionBy: %"location")
        let count = results.count
        var changes = results.changes.makeAsyncIterator()
        try harness.update { update in
            try #require(try update.fetch(Person.self, %"name" == "P19")).age = 99          // Rome, moves to the top
            try #require(try update.fetch(Person.self, %"name" == "P30")).location = "Rome"  // Oslo → Rome
            try update.delete(#require(try update.fetch(Person.self, %"name" == "P40")))
            try update.commit()
        }
        let change = try #require(await changes.next())
        #expect(results.fetchCount == 1)
        #expect(results.count == count - 1)
        #expect(change.movedRows.count == 2 && change.deletedRows.count == 1)
        #expect(results.sections.map { $0.objects.map(\.objectID) }
                == (try Self.grouped(world.fetchAll(Person.self, %"age" >= 18, orderBy: .ascending("location") | .descending("age")))))
    }

    /// Docs/Observation.md, "Change batches": which objects a batch moves. Four people by age,
    /// Ann, Bob, Cid and Dan; a commit raises Ann, Bob and Cid past Dan. Updated in place (a
    /// merging context), an object the commit did not touch never moves: Dan stays, and the
    /// three raised are three moves, not one. Refetched (a context that does not merge, at its
    /// reset), the batch is the difference of old and new contents, with as few moves as it can:
    /// Dan, untouched, is the one move, and the three raised are updates. Either way the lists
    /// are sorted ascending, `movedRows` by `to`, and a touched object that lands back between
    /// the same neighbours is an update.
    @Test(arguments: Setup.all) @MainActor func aBatchMovesUntouchedObjectsOnlyWhenTheResultsRefetch(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        try await harness.write { update in
            for (name, age) in [("Ann", 1), ("Bob", 2), ("Cid", 3), ("Dan", 4)] {
                let person = try update.create(Person.self)
                (person.name, person.age) = (name, age)
            }
            try update.commit()
        }
        let results = try FetchedResults(context: harness.world, Person.self, orderBy: .ascending("age"))
        var changes = results.changes.makeAsyncIterator()
        try await harness.write { update in
            for (name, age) in [("Ann", 5), ("Bob", 6), ("Cid", 7)] {
                try #require(try update.fetch(Person.self, %"name" == name)).age = age
            }
            try update.commit()
        }
        let raised = try #require(await changes.next())
        let merging = Setup.merging.contains { $0.topology == setup.topology }
        #expect(results.objects.map(\.name) == ["Dan", "Ann", "Bob", "Cid"])
        func row(_ item: Int) -> IndexPath { IndexPath(item: item, section: 0) }
        if merging {
            #expect(raised.movedRows == [.init(from: row(0), to: row(1)), .init(from: row(1), to: row(2)), .init(from: row(2), to: row(3))], "\(raised)")
            #expect(raised.updatedRows.isEmpty, "\(raised)")
        } else {
            #expect(raised.movedRows == [.init(from: row(3), to: row(0))], "\(raised)")
            #expect(raised.updatedRows == [row(0), row(1), row(2)], "\(raised)")
        }
        #expect(raised.movedRows.map(\.to) == raised.movedRows.map(\.to).sorted())

        try await harness.write { update in
            try #require(try update.fetch(Person.self, %"name" == "Bob")).age = 5    // still between Ann (5, first by key) and Cid
            try update.commit()
        }
        let inPlace = try #require(await changes.next())
        #expect(inPlace.movedRows.isEmpty && inPlace.updatedRows == [row(2)], "\(inPlace)")
    }

    /// Docs/Observation.md, "Observing one object": the block runs for each commit that changes
    /// the object, whichever context made it, also in a context that does not merge it. In a
    /// two-tier context without merge the held object keeps its old values (the pinned view),
    /// and after `reset()` a fetch by `change.objectID` reads the new ones; the observation
    /// goes on past the reset, since it follows the ID. In a per-consumer context the reset
    /// before the block has invalidated the object, and a fetch by ID reads the new values.
    @Test(arguments: Setup.all.filter { [.twoTierWithoutMerge, .perConsumer].contains($0.topology) }) @MainActor
    func anObservationRunsInAContextThatDoesNotMergeAndOutlivesItsResets(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let world = harness.world
        let monk = try #require(try world.fetch(Person.self, %"name" == "Monk"))
        let id = monk.objectID
        var seen: [(keys: Set<String>, held: Int?, fetched: Int?)] = []
        let watch = world.observe(monk) { change in
            let held = monk.state == .invalidated ? nil : monk.age
            if setup.topology == .twoTierWithoutMerge { world.reset() }
            seen.append((Set(change.changedKeys), held, (try? world.fetch(Person.self, id: change.objectID))?.age))
        }
        defer { watch.cancel() }
        for age in [44, 45] {
            // Not `write`: its `settle` would reset the two-tier context before the block.
            try harness.update { update in
                try #require(try update.fetch(Person.self, id: id)).age = age
                try update.commit()
            }
            try await harness.stack.flush()
            await mainQueueTurn()
        }
        #expect(seen.map(\.keys) == [["age"], ["age"]])
        #expect(seen.map(\.fetched) == [44, 45])
        // Two-tier without merge: the first block saw its held object as it was (63); the
        // second, after the first's reset, an invalid one. Per-consumer: invalid both times.
        #expect(seen.map(\.held) == (setup.topology == .twoTierWithoutMerge ? [63, nil] : [nil, nil]))
    }

    /// Docs/Observation.md, "What it costs": results that refetch read through another entity
    /// (`pets.@count`), and a commit that touches only that entity (a pet given to Knight)
    /// makes them refetch: Knight enters them.
    @Test(arguments: Setup.merging) @MainActor func aCommitToAnEntityTheConditionReadsThroughRefetches(setup: Setup) async throws {
        let harness = try await Self.world(setup)
        let results = try FetchedResults(context: harness.world, Person.self, %"pets.@count" > 0, orderBy: .ascending("name"))
        #expect(results.objects.isEmpty)
        var changes = results.changes.makeAsyncIterator()
        try await harness.write { update in
            let rex = try update.create(Pet.self)
            rex.name = "Rex"
            rex.owner = try update.fetch(Person.self, %"name" == "Knight")
            try update.commit()
        }
        let change = try #require(await changes.next())
        #expect(change.insertedRows == [IndexPath(item: 0, section: 0)])
        #expect(results.objects.map(\.name) == ["Knight"])
    }

    @MainActor static func grouped(_ people: [Person]) -> [[ObjectID]] {
        var sections: [[ObjectID]] = []
        var last: String?? = .none
        for person in people {
            if last == nil || last! != person.location { sections.append([]) }
            last = .some(person.location)
            sections[sections.count - 1].append(person.objectID)
        }
        return sections
    }

    @Test(arguments: Setup.merging) @MainActor func subEntitiesFollowTheFetchOptions(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let (store, world) = (harness.store, harness.world)
        let staff = try FetchedResults(context: world, Staff.self, orderBy: .ascending("name"))
        let onlyStaff = try FetchedResults(context: world, Staff.self, orderBy: .ascending("name"), options: .noSubEntities)
        var commits = store.stack.allCommits.makeAsyncIterator()
        try harness.update { update in
            try update.create(Staff.self).name = "Ann"
            try update.create(Engineer.self).name = "Bob"
            try update.commit()
        }
        _ = await commits.next()
        #expect(staff.objects.map(\.name) == ["Ann", "Bob"])
        #expect(onlyStaff.objects.map(\.name) == ["Ann"])
        #expect(try world.fetchAll(Staff.self, orderBy: .ascending("name"), options: .noSubEntities).map(\.name) == ["Ann"])
    }

    @Test func longestIncreasingSubsequenceKeepsTheMostInPlace() {
        #expect(ResultsDiff.longestIncreasing([]) == [])
        #expect(ResultsDiff.longestIncreasing([3, 1, 2, 0, 4]).map { [3, 1, 2, 0, 4][$0] } == [1, 2, 4])
        #expect(ResultsDiff.longestIncreasing([5, 4, 3]).count == 1)
    }
}
