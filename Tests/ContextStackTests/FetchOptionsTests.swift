@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

@Suite struct FetchOptionsTests {
    /// 25 people, each befriending the previous one, every third with two pets.
    /// A harness on `setup` holding `Fixtures.chain`, written and flushed.
    @MainActor private static func populated(_ setup: Setup) async throws -> (TestStore, MainContext) {
        let harness = try TopologyHarness(setup)
        try await harness.write(Fixtures.chain)
        return (harness.store, harness.world)
    }

    /// Docs/Queries.md, "Order": a fetch sorts by a to-one relationship itself, by the related
    /// object's primary key, NULLs first ascending, pending rows by the same rules; by a
    /// to-many it refuses with `.unsupported`, by a name or a typed key path that is no
    /// persisted property with `.unknownKey`. A query's unknown name lists its aliases.
    @Test(arguments: Setup.all) @MainActor
    func aFetchSortsByAToOneByItsKeyAndRefusesAToMany(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        try await harness.write { update in
            let people = try ["Ann", "Bob", "Cid"].map { name in
                let person = try update.create(Person.self)
                person.name = name
                return person
            }
            people[0].friend = people[2]
            people[2].friend = people[0]
            try update.commit()
        }
        let world = harness.world
        #expect(try world.fetchAll(Person.self, orderBy: .ascending("friend")).map(\.name) == ["Bob", "Cid", "Ann"])
        #expect(try world.fetchAll(Person.self, orderBy: .descending("friend")).map(\.name) == ["Ann", "Cid", "Bob"])
        try harness.update { update in
            try update.create(Person.self).name = "Dan"
            #expect(try update.fetchAll(Person.self, orderBy: .ascending("friend")).map(\.name) == ["Bob", "Dan", "Cid", "Ann"])
        }
        func code(_ fetch: () throws -> Void) -> QueryError.Code? {
            do { try fetch() } catch { return (error as? QueryError)?.code }
            return nil
        }
        #expect(code { _ = try world.fetchAll(Person.self, orderBy: .ascending("pets")) } == .unsupported)
        #expect(code { _ = try world.fetchAll(Person.self, orderBy: .ascending("nope")) } == .unknownKey)
        #expect(code { _ = try world.fetchAll(Person.self, orderBy: .ascending(\Person.scratch)) } == .unknownKey)
        let error = #expect(throws: QueryError.self) {
            _ = try world.query(Person.self, .average("age", alias: "avgAge") | .count("name", alias: "n"), groupBy: %"location", having: %"nope" > 1)
        }
        #expect(error?.code == .unknownKey && error?.message.contains("avgAge, n") == true, "\(String(describing: error))")
    }

    /// Docs/Queries.md, "Options": a negative `.limit` or `.offset` counts as 0, in fetches and
    /// in queries, on every store (PostgreSQL refuses a negative `LIMIT`).
    @Test(arguments: Setup.all) @MainActor
    func aNegativeLimitOrOffsetCountsAsZero(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        defer { withExtendedLifetime(store) {} }    // the store's database lives as long as it
        #expect(try world.fetchAll(Person.self, options: .limit(-3)).isEmpty)
        #expect(try world.fetch(Person.self, options: .limit(-1)) == nil)
        #expect(try world.fetchAll(Person.self, orderBy: .ascending("age"), options: .offset(-5) | .limit(2)).map(\.age) == [0, 1])
        #expect(try world.fetchIDs(Person.self, options: .limit(-1)).isEmpty)
        #expect(try world.query(Person.self, .select("age"), orderBy: .ascending("age"), options: .offset(-2) | .limit(1)).map { $0["age"] } == [.integer(0)])
        #expect(try world.query(Person.self, .select("age"), options: .limit(-1)).isEmpty)
        // The same, and the largest window, where pending changes are merged with stored rows
        // (`offset + limit` trapped on overflow, and a negative limit on `removeLast`).
        let pending = world.beginUpdateContext()
        try pending.performAndWait { update in
            try update.create(Person.self).name = "pending"
            #expect(try update.fetchAll(Person.self, options: .limit(-1)).isEmpty)
            #expect(try update.fetchAll(Person.self, orderBy: .ascending("age"), options: .offset(Int.max) | .limit(Int.max)).isEmpty)
            #expect(try update.fetchAll(Person.self, orderBy: .ascending("age"), options: .offset(-5) | .limit(Int.max)).count == 26)
        }
    }

    @Test(arguments: Setup.all) @MainActor
    func batchesLoadOnFirstUseOneStatementPerBatch(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        let counter = StatementCounter(store.stack)
        var people: [Person] = []
        let fetch = try counter.during {
            people = try world.fetchAll(Person.self, orderBy: .ascending("age"), options: .batch(10))
        }
        #expect(fetch.count == 1)
        #expect(!fetch[0].contains("\"name\""), "the fetch reads IDs only: \(fetch[0])")
        #expect(people.count == 25 && people.allSatisfy(\.isFault))
        do {
            let (ok, statements) = counter.value { people[0].name == "p00" }
            #expect(ok)
            #expect(statements.count == 1)
        }
        #expect(!people[9].isFault && people[10].isFault)
        do {
            let (ok, statements) = counter.value { people[9].age == 9 }
            #expect(ok)
            #expect(statements.isEmpty)
        }
        do {
            let (ok, statements) = counter.value { people[24].name == "p24" }
            #expect(ok)
            #expect(statements.count == 1)
        }
        #expect(people.map(\.age) == Array(0..<25))
    }

    /// `.batch(0)` is no batching, as Core Data's `fetchBatchSize = 0`: loaded objects, one
    /// statement; a cursor takes its default batch.
    @Test(arguments: Setup.all) @MainActor
    func aBatchOfZeroIsNoBatching(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        let counter = StatementCounter(store.stack)
        var people: [Person] = []
        let fetch = try counter.during {
            people = try world.fetchAll(Person.self, orderBy: .ascending("age"), options: .batch(0))
        }
        #expect(fetch.count == 1)
        #expect(people.count == 25 && people.allSatisfy { !$0.isFault })
        var cursor = try world.fetchCursor(Person.self, orderBy: .ascending("age"), options: .batch(0))
        var ages: [Int] = []
        while let person = try cursor.next() { ages.append(person.age) }
        #expect(ages == Array(0..<25))
    }

    @Test(arguments: Setup.all) @MainActor
    func prefetchedRelationshipsRunNoFurtherStatements(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        let counter = StatementCounter(store.stack)
        // Without prefetching, following relationships costs statements (the test can fail).
        let plain = try world.fetchAll(Person.self, orderBy: .ascending("age"))
        let lazy = counter.during { _ = plain.map { ($0.friend?.name, $0.pets.count) } }
        #expect(!lazy.isEmpty)
        world.reset()

        var people: [Person] = []
        let fetch = try counter.during {
            people = try world.fetchAll(Person.self, orderBy: .ascending("age"), options: .prefetch(["friend", "pets"]))
        }
        // The fetch (friends are among the fetched), the pets' memberships, the pets' rows.
        #expect(fetch.count == 3, "\(fetch)")
        let following = counter.during {
            for (index, person) in people.enumerated() {
                #expect(person.friend?.name == (index == 0 ? nil : String(format: "p%02d", index - 1)))
                #expect(person.pets.count == (index % 3 == 0 ? 2 : 0))
            }
        }
        #expect(following.isEmpty, "\(following)")
    }

    /// Docs/Queries.md, "Fetch options": options joined with `|` take the right side's value
    /// where both set one, and `.prefetch` lists add up.
    @Test(arguments: Setup.all) @MainActor
    func joinedOptionsTakeTheRightSideAndPrefetchListsAddUp(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        #expect(try world.fetchAll(Person.self, orderBy: .ascending("age"), options: .limit(5) | .limit(2)).map(\.age) == [0, 1])
        #expect(try world.fetchAll(Person.self, orderBy: .ascending("age"), options: .offset(3) | .limit(1) | .offset(1)).map(\.age) == [1])
        let counter = StatementCounter(store.stack)
        // A window whose people's friends are outside it (each one's friend is the person
        // before), so that following `friend` would read unless it was prefetched.
        let people = try world.fetchAll(Person.self, orderBy: .ascending("age"),
                                        options: .offset(9) | .limit(4) | .prefetch(["friend"]) | .offset(12) | .limit(1) | .prefetch(["pets"]))
        #expect(people.map(\.age) == [12])
        let following = counter.during {
            for person in people { _ = (person.friend?.name, person.pets.count) }
        }
        #expect(following.isEmpty, "\(following)")
    }

    /// Docs/Queries.md: `fetch(_:id:)` gives `nil` for an ID of another entity — another
    /// table's, or a sibling sub-entity's in the same table — rather than an object of the
    /// wrong type.
    @Test(arguments: StoreKind.available) @MainActor func fetchByIDOfAnotherEntityIsNil(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let (person, manager) = try world.beginUpdateAndWait { update in
            let person = try update.create(Person.self)
            let manager = try update.create(Manager.self)
            try update.commit()
            return (person.objectID, manager.objectID)
        }
        try store.stack.flushAndWait()
        world.reset()
        #expect(try world.fetch(Pet.self, id: person) == nil)
        #expect(try world.fetch(Engineer.self, id: manager) == nil)
        #expect(try world.fetch(Staff.self, id: manager)?.objectID == manager, "a sub-entity's object is its parent's too")
        let inAnUpdate = try world.beginUpdateAndWait { update in
            (try update.fetch(Pet.self, id: person), try update.fetch(Engineer.self, id: manager))
        }
        #expect(inAnUpdate.0 == nil && inAnUpdate.1 == nil)
    }

    @Test(arguments: Setup.all) @MainActor
    func nestedPrefetchAndPrefetchWithBatches(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        let counter = StatementCounter(store.stack)
        var people: [Person] = []
        _ = try counter.during {
            people = try world.fetchAll(Person.self, %"age" >= 20, orderBy: .ascending("age"), options: .prefetch(["friend.pets"]))
        }
        let following = counter.during {
            #expect(people.map { $0.friend?.pets.count ?? -1 } == [0, 0, 2, 0, 0])
        }
        #expect(following.isEmpty, "\(following)")

        world.reset()
        _ = try counter.during {
            people = try world.fetchAll(Person.self, orderBy: .ascending("age"), options: .batch(5) | .prefetch(["pets"]))
        }
        // The first use loads the batch, its pets' memberships and rows; then nothing for the batch.
        #expect(counter.during { _ = people[0].pets.count }.count == 3)
        do {
            let (ok, statements) = counter.value { people[3].pets.count == 2 }
            #expect(ok)
            #expect(statements.isEmpty)
        }
    }

    /// Docs/Queries.md, "Walking many objects": `.prefetch` applies to each batch of a cursor.
    /// Moving onto a batch reads its rows with the pets' memberships and rows (three
    /// statements), and following `pets` then runs none, through the whole walk.
    @Test(arguments: Setup.all) @MainActor
    func aCursorPrefetchesWithEachBatch(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        let counter = StatementCounter(store.stack)
        var cursor = try world.fetchCursor(Person.self, orderBy: .ascending("age"), options: .batch(5) | .prefetch(["pets"]))
        var petCounts: [Int] = []
        var statementsPerPerson: [Int] = []
        while true {
            let (person, moving) = try counter.value { try cursor.next() }
            guard let person else { break }
            let following = counter.during { petCounts.append(person.pets.count) }
            #expect(following.isEmpty, "\(following)")
            statementsPerPerson.append(moving.count)
        }
        #expect(petCounts == (0..<25).map { $0 % 3 == 0 ? 2 : 0 })
        #expect(statementsPerPerson == (0..<25).map { $0 % 5 == 0 ? 3 : 0 }, "\(statementsPerPerson)")
    }

    /// In an update, rows and members read ahead by `.prefetch` never hide the update's own
    /// later changes: a pet related to the prefetched farmer is among its pets (and a delete
    /// cascades to it), and a farmer the update deleted and committed is not made again from
    /// its read-ahead row.
    @Test(arguments: Setup.all) @MainActor
    func prefetchedRowsAndMembersFollowTheUpdatesOwnChanges(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        try await harness.write { update in
            let knight = try update.create(Person.self)
            let farmer = try update.create(Person.self)
            (knight.name, farmer.name) = ("Knight", "Farmer")
            knight.friend = farmer
            let rex = try update.create(Pet.self)
            (rex.name, rex.owner) = ("Rex", farmer)
            try update.commit()
        }
        try await harness.write { update in
            let knight = try #require(try update.fetch(Person.self, %"name" == "Knight", options: .prefetch(["friend.pets"])))
            let farmer = try #require(knight.friend)
            let fido = try update.create(Pet.self)
            (fido.name, fido.owner) = ("Fido", farmer)
            #expect(Set(farmer.pets.map(\.name)) == ["Rex", "Fido"])
            try update.delete(farmer)
            #expect(fido.isDeleted, "the cascade reached the pet related after the prefetch")
            try update.commit()
        }
        try await harness.stack.flush()
        #expect(try harness.world.fetchCount(Pet.self) == 0)

        let ann = try await harness.write { update in
            let knight = try update.create(Person.self)
            let ann = try update.create(Person.self)
            (knight.name, ann.name) = ("Knight", "Ann")
            knight.friend = ann
            try update.commit()
            return ann.objectID
        }
        try await harness.write { update in
            _ = try update.fetchAll(Person.self, %"name" == "Knight", options: .prefetch(["friend"]))
            try update.delete(#require(try update.fetch(Person.self, id: ann)))
            try update.commit()
            #expect(try update.fetch(Person.self, id: ann) == nil, "made again from the row read ahead before the commit")
        }
    }

    @Test(arguments: Setup.all) @MainActor
    func prefetchRejectsUnknownKeysAndAttributes(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        _ = store
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, options: .prefetch(["enemy"])) }
        #expect { _ = try world.fetchAll(Person.self, options: .prefetch(["name"])) } throws: {
            ($0 as? QueryError)?.code == .unsupported
        }
    }

    @Test(arguments: Setup.all) @MainActor
    func propertiesOnlyLoadsTheRestOnFirstUse(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        let counter = StatementCounter(store.stack)
        var people: [Person] = []
        let fetch = try counter.during {
            people = try world.fetchAll(Person.self, orderBy: .ascending("age"), options: .propertiesOnly(["name"]))
        }
        #expect(fetch.count == 1 && !fetch[0].components(separatedBy: " FROM ")[0].contains("\"age\""), "\(fetch)")
        do {
            let (ok, statements) = counter.value { people[3].name == "p03" }
            #expect(ok)
            #expect(statements.isEmpty)
        }
        do {
            let (ok, statements) = counter.value { people[3].age == 3 }
            #expect(ok)
            #expect(statements.count == 1)
        }
        do {
            let (ok, statements) = counter.value { people[3].location == nil && people[3].name == "p03" }
            #expect(ok)
            #expect(statements.isEmpty)
        }
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, options: .propertiesOnly(["friendOf"])) }
    }

    @Test(arguments: Setup.all) @MainActor
    func noPropertyValuesReturnsFaults(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        let counter = StatementCounter(store.stack)
        let people = try world.fetchAll(Person.self, %"age" < 3, orderBy: .ascending("age"), options: .noPropertyValues)
        #expect(people.count == 3 && people.allSatisfy(\.isFault))
        // Without a batch size each fault loads alone, as Core Data's do.
        do {
            let (ok, statements) = counter.value { people[1].age == 1 }
            #expect(ok)
            #expect(statements.count == 1)
        }
        #expect(people[0].isFault && !people[1].isFault)
        // An object already held keeps its values: a later fault fetch returns it loaded.
        let again = try world.fetchAll(Person.self, %"age" == 1, options: .noPropertyValues)
        #expect(again.first === people[1] && !people[1].isFault)
    }

    /// (A main context that keeps a pinned view loads the values as of its view instead.)
    @Test(arguments: Setup.merging) @MainActor
    func aFaultWhoseRowIsGoneReadsAsDeleted(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        _ = store
        let faults = try world.fetchAll(Person.self, %"age" == 7, options: .noPropertyValues)
        let fault = try #require(faults.first)
        try world.beginUpdateAndWait { update in
            try update.delete(try #require(try update.fetch(Person.self, %"age" == 7)))
            try update.commit()
        }
        #expect(fault.name == "")  // the entity's default: the values were never loaded
        #expect(fault.isDeleted)
        #expect(try world.fetchCount(Person.self, %"age" == 7) == 0)
    }

    @Test @MainActor func noSubEntitiesLeavesSubEntitiesOut() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try update.create(Staff.self).name = "staff"
            try update.create(Engineer.self).name = "engineer"
            try update.create(Manager.self).name = "manager"
            try update.commit()
        }
        #expect(try world.fetchAll(Staff.self, orderBy: .ascending("name")).map(\.name) == ["engineer", "manager", "staff"])
        #expect(try world.fetchAll(Staff.self, options: .noSubEntities).map(\.name) == ["staff"])
        #expect(try world.fetchIDs(Staff.self, options: .noSubEntities).count == 1)
        try world.beginUpdateAndWait { update in
            // Pending objects obey it too.
            try update.create(Engineer.self).name = "new engineer"
            try update.create(Staff.self).name = "new staff"
            #expect(try update.fetchAll(Staff.self, orderBy: .ascending("name"), options: .noSubEntities).map(\.name) == ["new staff", "staff"])
        }
    }

    @Test(arguments: Setup.all) @MainActor
    func noPendingChangesMatchesBySavedValues(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        _ = store
        try world.beginUpdateAndWait { update in
            let created = try update.create(Person.self)
            created.name = "new"
            created.age = 100
            let changed = try #require(try update.fetch(Person.self, %"age" == 5))
            changed.age = 200
            #expect(try update.fetchAll(Person.self, %"age" >= 100).count == 2)
            let saved = try update.fetchAll(Person.self, %"age" >= 100, options: .noPendingChanges)
            #expect(saved.isEmpty)
            let bySavedValue = try update.fetchAll(Person.self, %"age" == 5, options: .noPendingChanges)
            // The context's own object comes back, with its pending value.
            #expect(bySavedValue.count == 1 && bySavedValue[0] === changed && changed.age == 200)
        }
    }

    @Test(arguments: Setup.all) @MainActor
    func tweakChangesTheRequestLast(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        let people = try world.fetchAll(Person.self, %"age" > 10, orderBy: .ascending("age"),
                                        options: .limit(10) | .tweak { request in
                                            request.limit = 3
                                            request.orderBy = .descending("age")
                                        })
        #expect(people.map(\.age) == [24, 23, 22])
        let seen = Locked<FetchRequest?>(nil)
        _ = try world.fetchAll(Person.self, options: .batch(7) | .noSubEntities | .tweak { request in seen.withLock { $0 = request } })
        let request = try #require(seen.withLock { $0 })
        #expect(request.batchSize == 7 && !request.includesSubEntities && request.includesPendingChanges)
        // Tweaks run in order: the last one's limit stands.
        #expect(try world.fetchAll(Person.self, orderBy: .ascending("age"), options: .tweak { $0.limit = 5 } | .tweak { $0.limit = 2 }).map(\.age) == [0, 1])
        // Docs/Queries.md: `fetch(_:id:)` runs no SQL when the context holds the object.
        let held = try #require(people.first)
        let counter = StatementCounter(store.stack)
        let again = try counter.value { try world.fetch(Person.self, id: held.objectID) }
        #expect(again.0 === held && again.1.isEmpty, "\(again.1)")
        store.stack.trace(nil)
    }

    @Test(arguments: Setup.all) @MainActor
    func cursorsLoadOneBatchAtATimeAndLetGo(setup: Setup) async throws {
        let (store, world) = try await Self.populated(setup)
        let counter = StatementCounter(store.stack)
        var cursor = try world.fetchCursor(Person.self, %"age" >= 2, orderBy: .ascending("age"), options: .batch(10))
        weak var firstOfFirstBatch: Person?
        var ages: [Int] = []
        let statements = try counter.during {
            while let person = try cursor.next() {
                if ages.isEmpty { firstOfFirstBatch = person }
                ages.append(person.age)
                if ages.count == 11 {
                    // The first batch is let go once the cursor moves on.
                    #expect(firstOfFirstBatch == nil)
                }
            }
        }
        #expect(ages == Array(2..<25))
        #expect(statements.count == 3, "three batches of rows: \(statements)")
        #expect(try cursor.next() == nil)
    }

    /// A cursor's batches come back in the cursor's order whatever the order of the keys (here
    /// the reverse), and skip an object deleted below the context after the cursor was made.
    @Test(arguments: Setup.all) @MainActor
    func cursorsKeepTheirOrderAndSkipWhatWasDeletedSince(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        try await harness.write(Fixtures.chain)
        var cursor = try harness.world.fetchCursor(Person.self, orderBy: .descending("age"), options: .batch(4))
        try await harness.write { update in
            try update.delete(#require(try update.fetch(Person.self, %"age" == 20)))
            try update.commit()
        }
        try await harness.store.stack.flush()
        var ages: [Int] = []
        while let person = try cursor.next() { ages.append(person.age) }
        #expect(ages == Array((0..<25).reversed()).filter { $0 != 20 })
    }

    /// An object the main context holds, deleted by a commit handed to it that it has not
    /// merged yet (the main queue is busy): `fetch(_:id:)` returns `nil` and a cursor skips
    /// it, as a read that reaches the store does (Docs/Queries.md). Both answered from the
    /// held object before, without applying the handed-over commits.
    @Test(arguments: StoreKind.available) @MainActor
    func aHeldObjectDeletedBelowIsNotReturnedByIDNorByACursor(kind: StoreKind) async throws {
        let harness = try TopologyHarness(.threeTier, kind: kind)
        try await harness.write(Fixtures.chain)
        let held = try harness.world.fetchAll(Person.self)
        var cursor = try harness.world.fetchCursor(Person.self, orderBy: .ascending("age"), options: .batch(4))
        let victim = try #require(held.first { $0.age == 20 }).objectID
        let done = DispatchSemaphore(value: 0)
        harness.world.beginUpdate { update in
            defer { done.signal() }
            try update.delete(#require(try update.fetch(Person.self, id: victim)))
            try update.commit()
        }
        // Blocks the main actor: the commit is handed to the world, its merge waits.
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(try harness.world.fetch(Person.self, id: victim) == nil)
        var ages: [Int] = []
        while let person = try cursor.next() { ages.append(person.age) }
        #expect(ages == Array(0..<25).filter { $0 != 20 })
        _ = held
    }

    /// Docs/Queries.md, "Faults": a fault loads its values through the context's view, so in a
    /// main context that does not merge it loads them from the pinned view: a commit made after
    /// the pin does not show until `reset()`.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aFaultOfAContextThatDoesNotMergeLoadsFromItsPinnedView(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let quiet = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        let id = try quiet.beginUpdateAndWait { update -> ObjectID in
            let ann = try update.create(Person.self)
            (ann.name, ann.age) = ("Ann", 30)
            try update.commit()
            return ann.objectID
        }
        try await store.stack.flush()
        quiet.reset()
        let faults = try quiet.fetchAll(Person.self, options: .noPropertyValues)    // pins the view
        let ann = try #require(faults.first)
        #expect(ann.isFault)
        try quiet.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: id)).age = 31
            try update.commit()
        }
        try await store.stack.flush()
        #expect(try store.writtenScalar("SELECT age FROM \"Person\"") == .integer(31))
        #expect(ann.age == 30, "the fault fired through the pinned view")
        quiet.reset()
        #expect(try quiet.fetch(Person.self, id: id)?.age == 31)
    }

    /// Docs/Queries.md, "Fetch options": an update does not take in other contexts' commits
    /// while it runs. An object it holds that another context deleted meanwhile is still
    /// returned by `fetch(_:id:)` and by its cursor as it holds it, while `fetchAll` and
    /// `fetchCount`, which read the store, leave it out; a change to it fails the commit under
    /// `.error` (under `.objectTrump` the deletion wins: Docs/Concurrency.md).
    @Test(arguments: StoreKind.available) @MainActor
    func anUpdateReturnsAnObjectItHoldsThoughAnotherContextDeletedIt(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let writer = try ContextStack.Context(stack: store.stack, updateTarget: .persistentStore)
        let ids = try writer.beginUpdateAndWait { update -> [ObjectID] in
            let people = try ["Ann", "Bob"].map { name in
                let person = try update.create(Person.self)
                person.name = name
                return person
            }
            try update.commit()
            return people.map(\.objectID)
        }
        let other = try ContextStack.Context(stack: store.stack, updateTarget: .persistentStore)
        let conflict = try #require(throws: MergeConflictError.self) {
            try ContextStack.Context(stack: store.stack, updateTarget: .persistentStore, mergePolicy: .error).beginUpdateAndWait { update in
                let bob = try #require(try update.fetch(Person.self, id: ids[1]))
                var cursor = try update.fetchCursor(Person.self, orderBy: .ascending("name"))    // made before the delete
                try other.beginUpdateAndWait { elsewhere in
                    try elsewhere.delete(#require(try elsewhere.fetch(Person.self, id: ids[1])))
                    try elsewhere.commit()
                }
                #expect(try update.fetch(Person.self, id: ids[1]) === bob)
                var names: [String] = []
                while let person = try cursor.next() { names.append(person.name) }
                #expect(names == ["Ann", "Bob"])
                #expect(try update.fetchAll(Person.self).map(\.name) == ["Ann"])
                #expect(try update.fetchCount(Person.self) == 1)
                bob.age = 40
                try update.commit()
            }
        }
        #expect(conflict.conflicts.contains { $0.key == "<deleted>" }, "\(conflict)")
    }
}
