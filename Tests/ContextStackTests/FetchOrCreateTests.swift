@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

@Suite struct FetchOrCreateTests {
    /// On a unique key, `fetchOrCreate` finds this update's pending objects through an index
    /// kept up to date lazily, not by evaluating each of them: it must still find exactly what
    /// a fetch finds — objects whose unique value was set or changed after they were made or
    /// fetched, and never an object whose value changed away or that was deleted.
    /// On a unique key, a stored match is read whole in one statement — the object comes with
    /// the row the look-up found, not by a second read of its ID (Docs/Performance.md, "What
    /// was changed": imports read the store once per row).
    @Test(arguments: StoreKind.available)
    func onAUniqueKeyAStoredMatchIsReadOnce(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = try ContextStack.Context(stack: store.stack)
        try context.beginUpdateAndWait { update in
            let stored = try update.create(Person.self)
            (stored.name, stored.email) = ("Stored", "stored@example.com")
            try update.commit()
        }
        try store.stack.flushAndWait()
        let statements = Locked<[String]>([])
        try ContextStack.Context(stack: store.stack).beginUpdateAndWait { update in
            store.stack.trace { sql in statements.withLock { $0.append(sql) } }
            defer { store.stack.trace(nil) }
            let found = try update.fetchOrCreate(Person.self, %"email" == "stored@example.com")
            #expect(!found.isInserted && found.name == "Stored")
        }
        let reads = statements.withLock { $0 }.filter { $0.contains("FROM \"Person\"") }
        #expect(reads.count == 1, "\(reads)")
    }

    /// Who merges into whom when a key is saved first (Docs/Writing.md, "fetchOrCreate on
    /// unique keys"): an object a `fetchOrCreate` made merges into the row that saved its key
    /// first, whether `create` or `fetchOrCreate` made that row; an object made with
    /// `create(_:)` never merges, and its commit fails with `.uniquenessViolated`.
    @Test(arguments: StoreKind.available)
    func aFetchOrCreateMergesIntoARowCreateSavedFirstAndNotTheOtherWay(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let first = try ContextStack.Context(stack: store.stack)
        let second = try ContextStack.Context(stack: store.stack)
        try first.beginUpdateAndWait { update in
            let ada = try update.fetchOrCreate(Person.self, %"email" == "ada@example.com")
            (ada.name, ada.age) = ("Ada (fetchOrCreate)", 36)
            try second.beginUpdateAndWait { other in
                let created = try other.create(Person.self)
                (created.name, created.email) = ("Ada (create)", "ada@example.com")
                try other.commit()
            }
            try update.commit()
        }
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT name, age FROM \"Person\" WHERE email = 'ada@example.com'") == [[.text("Ada (fetchOrCreate)"), .integer(36)]])

        let error = #expect(throws: SaveError.self) {
            try first.beginUpdateAndWait { update in
                let grace = try update.create(Person.self)
                (grace.name, grace.email) = ("Grace (create)", "grace@example.com")
                try second.beginUpdateAndWait { other in
                    try other.fetchOrCreate(Person.self, %"email" == "grace@example.com").name = "Grace (fetchOrCreate)"
                    try other.commit()
                }
                try update.commit()
            }
        }
        #expect(error?.code == .uniquenessViolated)
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT name FROM \"Person\" WHERE email = 'grace@example.com'") == [[.text("Grace (fetchOrCreate)")]])
    }

    /// Docs/Writing.md and GettingStarted.md ("Coming from Core Data"): two `fetchOrCreate`s of
    /// one key always end in one row, property by property, the commit written second winning,
    /// whatever the contexts' merge policy — `.error` included, where Core Data would report a
    /// constraint conflict. The merge policy governs changes to objects both commits read.
    @Test(arguments: [MergePolicy.objectTrump, .storeTrump, .overwrite, .rollback, .error])
    func twoFetchOrCreatesOfOneKeyMergeWhateverTheMergePolicy(policy: MergePolicy) throws {
        let store = try TestStore(.file)
        let first = try ContextStack.Context(stack: store.stack, mergePolicy: policy)
        let second = try ContextStack.Context(stack: store.stack, mergePolicy: policy)
        let a = first.beginUpdateContext(), b = second.beginUpdateContext()
        try a.performAndWait { update in
            let ada = try update.fetchOrCreate(Person.self, %"email" == "ada@example.com")
            (ada.name, ada.age) = ("A", 1)
        }
        try b.performAndWait { update in
            try update.fetchOrCreate(Person.self, %"email" == "ada@example.com").name = "B"
        }
        try a.performAndWait { try $0.commit() }
        try b.performAndWait { try $0.commit() }
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT name, age FROM \"Person\" WHERE email = 'ada@example.com'") == [[.text("B"), .integer(1)]])
    }

    /// Docs/Writing.md, "fetchOrCreate on unique keys": a store keeps at most 50,000 claims and
    /// then forgets the oldest half. Two `fetchOrCreate`s racing on a forgotten key make two
    /// objects, and the one committed second merges into the first one's row: never a duplicate.
    @Test(arguments: StoreKind.available)
    func pastTheClaimLimitARaceOnAForgottenKeyStillMakesOneRow(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let first = try ContextStack.Context(stack: store.stack)
        let filler = try ContextStack.Context(stack: store.stack)
        let second = try ContextStack.Context(stack: store.stack)
        try first.beginUpdateAndWait { update in
            let ada = try update.fetchOrCreate(Person.self, %"email" == "ada@example.com")
            ada.name = "Ada (first)"
            let claimed = ada.objectID
            // Claims enough to push Ada's out. Never committed: a claim outlives its update.
            try filler.beginUpdateAndWait { other in
                for index in 0..<SQLiteStore.maximumClaims {
                    _ = try other.fetchOrCreate(Person.self, %"email" == "\(index)@example.com")
                }
            }
            try second.beginUpdateAndWait { other in
                let again = try other.fetchOrCreate(Person.self, %"email" == "ada@example.com")
                #expect(again.objectID != claimed, "the oldest claim was kept past the limit")
                (again.name, again.age) = ("Ada (second)", 36)
                try other.commit()
            }
            try update.commit()
        }
        try store.stack.flushAndWait()
        // The first update's object merged into the row the second saved, its name winning.
        #expect(try store.writtenRows("SELECT name, age FROM \"Person\" WHERE email = 'ada@example.com'") == [[.text("Ada (first)"), .integer(36)]])
    }

    /// A new object's unique values are looked up in the store once when its commit is handed
    /// over — for a row another process saved meanwhile (`adoptSavedRows`) and for uniqueness
    /// (`checkUniqueness`) alike, where each used to read them: a round trip per new object on
    /// PostgreSQL — and once more by the writer, in its transaction.
    @Test(arguments: StoreKind.available)
    func aNewObjectsUniqueValuesAreLookedUpOnceWhenHandedOver(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let statements = Locked<[String]>([])
        try ContextStack.Context(stack: store.stack).beginUpdateAndWait { update in
            let ada = try update.fetchOrCreate(Person.self, %"email" == "ada@example.com")
            ada.name = "Ada"
            store.stack.trace { sql in statements.withLock { $0.append(sql) } }
            defer { store.stack.trace(nil) }
            try update.commit()
        }
        let lookups = statements.withLock { $0 }.filter { $0.hasPrefix("SELECT \"Z_PK\" FROM \"Person\" WHERE \"email\" = ") }
        #expect(lookups.count == 2, "\(lookups)")
        #expect(try store.writtenRows("SELECT name FROM \"Person\" WHERE email = 'ada@example.com'") == [[.text("Ada")]])
    }

    /// Two `fetchOrCreate`s of one email agree on one object, in two updates whose commits
    /// are not written yet: both wait (`.persistentStore`), or the first is visible, queued by
    /// the root for its background writer (`.rootContext`). The first one's write then fails.
    /// The second commit, made while the first was unwritten, waits for it before it is
    /// checked: it is not merged into an insert that is never stored, and its object is saved —
    /// where it used to become an update of a row that never was, and be lost without an error
    /// (Docs/Writing.md, "fetchOrCreate on unique keys"). A commit that waits throws the first
    /// one's error; one to the root reports it to the next flush.
    @Test(arguments: Self.unwrittenCases)
    func aCommitAgreeingWithAnUnwrittenOneOutlivesItsFailedWrite(kind: StoreKind, target: UpdateTarget) throws {
        let store = try TestStore(kind)
        try store.refuseWrites(ofName: "refused")
        let failures = try twoAgreeingUnwrittenCommits(store, target: target, first: ("refused", "London"))
        if target == .persistentStore {
            #expect(failures.count == 1 && failures["refused"].map(TestStore.isRefusal) == true, "\(failures)")
        } else {
            #expect(failures.isEmpty, "\(failures)")
            #expect(throws: (any Error).self) { try store.stack.flushAndWait() }
        }
        #expect(try store.writtenRows("SELECT name, age, location FROM \"Person\" WHERE email = 'ada@example.com'")
                == [[.text("Ada"), .integer(36), .null]])
        // The object the failed commit inserted is stored after all: a later change to it is
        // not one built on a failed commit (`SaveError.dependsOnFailedCommit`).
        try ContextStack.Context(stack: store.stack, updateTarget: target).beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, %"email" == "ada@example.com")).age = 37
            try update.commit()
        }
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT age FROM \"Person\" WHERE email = 'ada@example.com'") == [[.integer(37)]])
    }

    /// The same two commits, the first written: the second, checked once the first is, merges
    /// into the row it stored — its values winning, the first one's kept where it gave none.
    @Test(arguments: Self.unwrittenCases)
    func aCommitAgreeingWithAnUnwrittenOneIsMergedIntoItsRow(kind: StoreKind, target: UpdateTarget) throws {
        let store = try TestStore(kind)
        let failures = try twoAgreeingUnwrittenCommits(store, target: target, first: ("Grace", "London"))
        #expect(failures.isEmpty, "\(failures)")
        try store.stack.flushAndWait()
        #expect(try store.writtenRows("SELECT name, age, location FROM \"Person\" WHERE email = 'ada@example.com'")
                == [[.text("Ada"), .integer(36), .text("London")]])
    }

    /// Stores with a writer to hold (not in memory), and the two targets whose commits are
    /// written after they are handed over.
    static let unwrittenCases: [(StoreKind, UpdateTarget)] =
        ([StoreKind.file] + StoreKind.available.filter { $0 == .postgres }).flatMap { kind in
            [(kind, UpdateTarget.persistentStore), (kind, .rootContext(autoMerge: false))]
        }

    /// Runs two updates that `fetchOrCreate` the person of one email — both before either
    /// commits, so that they agree on one new object — and commit to `target`, the first with
    /// `first`'s name and location, the second with the name Ada and the age 36, both handed
    /// over before either is written (the test holds the writer); returns the errors their
    /// commits threw, by name.
    private func twoAgreeingUnwrittenCommits(_ store: TestStore, target: UpdateTarget,
                                             first: (name: String, location: String)) throws -> [String: any Error] {
        // A block of keys reserved beforehand: reserving one takes the writer on SQLite.
        try ContextStack.Context(stack: store.stack).beginUpdateAndWait { update in
            try update.create(Person.self).name = "first"
            try update.commit()
        }
        try store.stack.flushAndWait()
        let errors = Locked<[String: any Error]>([:])
        let finished = DispatchGroup()
        let made = DispatchSemaphore(value: 0)
        func commit(_ name: String, when go: DispatchSemaphore, _ change: @escaping @Sendable (Person) -> Void) {
            finished.enter()
            DispatchQueue.global().async {
                defer { finished.leave() }
                do {
                    try ContextStack.Context(stack: store.stack, updateTarget: target).beginUpdateAndWait { update in
                        change(try update.fetchOrCreate(Person.self, %"email" == "ada@example.com"))
                        made.signal()
                        go.wait()
                        try update.commit()
                    }
                } catch {
                    errors.withLock { $0[name] = error }
                }
            }
        }
        let (goFirst, goSecond) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        // Each step is given a minute, so that a regression fails the test instead of hanging it
        // (with the writer held).
        func within(_ step: String, _ done: () -> Bool) {
            let deadline = Date().addingTimeInterval(60)
            while !done() {
                guard Date() < deadline else {
                    Issue.record("\(step) did not happen within a minute: \(errors.withLock { $0 })")
                    return
                }
                usleep(1_000)
            }
        }
        try store.holdingTheWriter {
            let before = store.commitsHandedOver
            commit(first.name, when: goFirst) { person in (person.name, person.location) = (first.name, first.location) }
            commit("Ada", when: goSecond) { person in (person.name, person.age) = ("Ada", 36) }
            for _ in 0..<2 where made.wait(timeout: .now() + 60) == .timedOut {
                Issue.record("an update did not make its object within a minute: \(errors.withLock { $0 })")
            }
            goFirst.signal()
            within("the first commit's hand-over") { store.commitsHandedOver >= before + 1 }
            // The second commit waits for the first to be written before it is checked; before
            // 2026-11-26 it was merged into the first at once, and handed over (then waited for
            // its own write, on `.persistentStore`).
            goSecond.signal()
            within("the second commit's wait or hand-over") {
                store.commitsWaitingForEarlierOnes >= 1 || store.commitsHandedOver >= before + 2
            }
        }
        finished.wait()
        return errors.withLock { $0 }
    }

    @Test(arguments: StoreKind.available)
    func onAUniqueKeyFindsPendingObjectsByTheirCurrentValues(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = try ContextStack.Context(stack: store.stack)
        let stored = try context.beginUpdateAndWait { update -> ObjectID in
            let stored = try update.create(Person.self)
            (stored.name, stored.email) = ("Stored", "stored@example.com")
            try update.commit()
            return stored.objectID
        }
        try context.beginUpdateAndWait { update in
            let a = try update.fetchOrCreate(Person.self, %"email" == "a@example.com")
            #expect(a.isInserted)
            #expect(try update.fetchOrCreate(Person.self, %"email" == "a@example.com") === a)
            // Its unique value changes after the index filed it.
            a.email = "b@example.com"
            #expect(try update.fetchOrCreate(Person.self, %"email" == "b@example.com") === a)
            let another = try update.fetchOrCreate(Person.self, %"email" == "a@example.com")
            #expect(another !== a && another.isInserted)
            // Made with `create`, its value set afterwards.
            let made = try update.create(Person.self)
            made.email = "made@example.com"
            #expect(try update.fetchOrCreate(Person.self, %"email" == "made@example.com") === made)
            // A stored object whose value this update changes: found by its new value only.
            let changed = try #require(try update.fetch(Person.self, id: stored))
            changed.email = "changed@example.com"
            #expect(try update.fetchOrCreate(Person.self, %"email" == "changed@example.com") === changed)
            let replacement = try update.fetchOrCreate(Person.self, %"email" == "stored@example.com")
            #expect(replacement !== changed && replacement.isInserted)
            // Deleted: not found again.
            try update.delete(another)
            let third = try update.fetchOrCreate(Person.self, %"email" == "a@example.com")
            #expect(third !== another && third.isInserted)
            // The other equality terms still count.
            let named = try update.fetchOrCreate(Person.self, %"email" == "n@example.com" && %"name" == "Ann")
            #expect(try update.fetchOrCreate(Person.self, %"email" == "n@example.com" && %"name" == "Ann") === named)
            named.name = "Bob"
            #expect(try update.fetch(Person.self, %"email" == "n@example.com" && %"name" == "Ann") == nil)
            update.rollback()
        }
        // A new update starts without the last one's index.
        let (found, made) = try context.beginUpdateAndWait { update in
            (try update.fetchOrCreate(Person.self, %"email" == "stored@example.com").objectID,
             try update.fetchOrCreate(Person.self, %"email" == "a@example.com").isInserted)
        }
        #expect(found == stored)
        #expect(made)
    }

    /// An object `fetchOrCreate` made whose unique value the update changed before committing
    /// gives up the value it was made for: a later `fetchOrCreate` of that value, in another
    /// update, makes an object of its own. (The claim on the value used to outlive the change,
    /// so the later `fetchOrCreate` was given the first object's ID and its commit merged into
    /// that object's row: "Ann" became "Bob", and one row was left of two.)
    @Test(arguments: StoreKind.available)
    func aValueAFetchOrCreatedObjectChangedAwayFromIsFreeForTheNextOne(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = try ContextStack.Context(stack: store.stack)
        let ann = try context.beginUpdateAndWait { update -> ObjectID in
            let ann = try update.fetchOrCreate(Person.self, %"email" == "X@example.com")
            (ann.email, ann.name) = ("x@example.com", "Ann")
            try update.commit()
            return ann.objectID
        }
        try store.stack.flushAndWait()
        let bob = try context.beginUpdateAndWait { update -> ObjectID in
            let bob = try update.fetchOrCreate(Person.self, %"email" == "X@example.com")
            #expect(bob.isInserted)
            bob.name = "Bob"
            try update.commit()
            return bob.objectID
        }
        try store.stack.flushAndWait()
        #expect(bob != ann)
        #expect(try store.writtenRows("SELECT name, email FROM \"Person\" ORDER BY name") == [[.text("Ann"), .text("x@example.com")], [.text("Bob"), .text("X@example.com")]])
    }

    /// The index files an object under each constraint whose values it holds: a compound
    /// constraint by all of its values, an entity with two constraints under both, and two
    /// pending objects that share a key (a commit would refuse them) under that key together
    /// until one of them changes away.
    @Test(arguments: StoreKind.available)
    func onAUniqueKeyFindsPendingObjectsByEveryConstraint(kind: StoreKind) throws {
        let store = try TestStore(kind, types: uniquenessTypes)
        let context = try ContextStack.Context(stack: store.stack)
        try context.beginUpdateAndWait { update in
            let ada = try update.fetchOrCreate(Member.self, %"first" == "Ada" && %"last" == "Lovelace")
            #expect(try update.fetchOrCreate(Member.self, %"first" == "Ada" && %"last" == "Lovelace") === ada)
            let byron = try update.fetchOrCreate(Member.self, %"first" == "Ada" && %"last" == "Byron")
            #expect(byron !== ada && byron.isInserted)
            // Two pending objects with one key: the look-up finds one of them, and after one
            // changes away, the other.
            let twin = try update.create(Member.self)
            (twin.first, twin.last) = ("Ada", "Lovelace")
            let found = try update.fetchOrCreate(Member.self, %"first" == "Ada" && %"last" == "Lovelace")
            #expect(found === ada || found === twin)
            ada.last = "King"
            #expect(try update.fetchOrCreate(Member.self, %"first" == "Ada" && %"last" == "Lovelace") === twin)
            #expect(try update.fetchOrCreate(Member.self, %"first" == "Ada" && %"last" == "King") === ada)
            twin.last = "Byron"
            let third = try update.fetchOrCreate(Member.self, %"first" == "Ada" && %"last" == "Lovelace")
            #expect(third !== ada && third !== twin && third !== byron && third.isInserted)
            // Two constraints: found by either.
            let phone = try update.create(Phone.self)
            (phone.serial, phone.number) = ("S1", "555")
            #expect(try update.fetchOrCreate(Phone.self, %"serial" == "S1") === phone)
            #expect(try update.fetchOrCreate(Phone.self, %"number" == "555") === phone)
            phone.number = "556"
            #expect(try update.fetchOrCreate(Phone.self, %"serial" == "S1") === phone)
            #expect(try update.fetchOrCreate(Phone.self, %"number" == "556") === phone)
            #expect(try update.fetchOrCreate(Phone.self, %"number" == "555") !== phone)
            update.rollback()
        }
    }

    /// A batch operation of the update writes values into its objects, and deletes some,
    /// without the setters that keep `fetchOrCreate`'s index of pending objects current: the
    /// next `fetchOrCreate` still finds what a fetch finds.
    @Test(arguments: StoreKind.available)
    func onAUniqueKeyFollowsTheUpdatesBatchOperations(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = try ContextStack.Context(stack: store.stack)
        let (kept, gone) = try context.beginUpdateAndWait { update -> (ObjectID, ObjectID) in
            let kept = try update.create(Person.self)
            (kept.name, kept.email) = ("Kept", "kept@example.com")
            let gone = try update.create(Person.self)
            (gone.name, gone.email) = ("Gone", "gone@example.com")
            try update.commit()
            return (kept.objectID, gone.objectID)
        }
        try context.beginUpdateAndWait { update in
            // Both changed in this update, and filed by a first fetchOrCreate.
            try #require(try update.fetch(Person.self, id: kept)).age = 1
            try #require(try update.fetch(Person.self, id: gone)).age = 1
            _ = try update.fetchOrCreate(Person.self, %"email" == "other@example.com")
            #expect(try update.batchUpdate(Person.self, %"email" == "kept@example.com", set: ["email": .text("moved@example.com")]) == 1)
            #expect(try update.batchDelete(Person.self, %"email" == "gone@example.com") == 1)
            #expect(try update.fetchOrCreate(Person.self, %"email" == "moved@example.com").objectID == kept)
            let again = try update.fetchOrCreate(Person.self, %"email" == "gone@example.com")
            #expect(again.objectID != gone && again.isInserted)
            update.rollback()
        }
    }

    @Test(arguments: Setup.all) @MainActor
    func createsWithTheEqualityValuesThenFindsTheSameObject(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        let first = try await harness.write { update in
            let knight = try update.fetchOrCreate(Person.self, %"name" == "Knight" && %"age" == 18)
            #expect(knight.isInserted)
            #expect(knight.name == "Knight" && knight.age == 18)
            #expect(try update.fetchOrCreate(Person.self, %"name" == "Knight" && %"age" == 18) === knight)
            try update.commit()
            return knight.objectID
        }
        let second = try await harness.write { update in
            try update.fetchOrCreate(Person.self, %"name" == "Knight" && %"age" == 18).objectID
        }
        #expect(first == second)
        #expect(try world.fetchCount(Person.self) == 1)
    }

    @Test(arguments: Setup.all) @MainActor
    func setsRelationshipsAndConvertsNumbers(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        try await harness.write { update in
            let farmer = try update.create(Person.self)
            let rex = try update.fetchOrCreate(Pet.self, %"owner" == farmer && %"name" == "Rex")
            #expect(rex.owner === farmer)
            #expect(farmer.pets == [rex])
            let sample = try update.fetchOrCreate(Sample.self, %"double" == 3 && %"int" == 4.0 && %"optionalString" == nil)
            #expect(sample.double == 3 && sample.int == 4 && sample.optionalString == nil)
            try update.commit()
        }
    }

    @Test(arguments: Setup.all) @MainActor
    func otherShapesThrowBeforeCreatingAnything(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        let invalid: [Condition] = [
            %"name" == "a" || %"age" == 1, %"age" > 3, !(%"name" == "a"), %"name" == %"location", %"friend.name" == "x", .all,
        ]
        for condition in invalid {
            await #expect {
                try await harness.write { update in
                    _ = try update.fetchOrCreate(Person.self, condition)
                    #expect(try update.fetchCount(Person.self) == 0)
                    try update.commit()
                }
            } throws: { error in
                (error as? QueryError)?.code == .invalidFetchOrCreate
            }
        }
        await #expect(throws: QueryError.self) {
            try await harness.write { update in _ = try update.fetchOrCreate(Person.self, %"nope" == 1) }
        }
        await #expect(throws: QueryError.self) {
            try await harness.write { update in _ = try update.fetchOrCreate(Sample.self, %"int" == 2.5) }
        }
        #expect(try world.fetchCount(Person.self) == 0)
    }

    /// "A value that does not fit throws `.typeMismatch`": a number out of an `Int16`'s or an
    /// `Int32`'s range, a `Bool` other than 0 or 1, `nil` for a non-optional attribute, a raw
    /// value none of an enum's cases has. Stored, each would read back as another value
    /// (`Int16(truncatingIfNeeded:)`, `true`, `""`, the enum's default), which
    /// the same condition would not find again. Values that fit are created as asked.
    @Test(arguments: Setup.all) @MainActor
    func aValueTheAttributeCannotHoldThrowsTypeMismatch(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let misfits: [(ManagedObject.Type, Condition)] = [
            (Sample.self, %"int16" == 40_000), (Sample.self, %"int32" == Int64(Int32.max) + 1),
            (Sample.self, %"flag" == 2), (Person.self, %"name" == nil), (Sample.self, %"mood" == "furious"),
        ]
        for (type, condition) in misfits {
            let error = await #expect(throws: QueryError.self, "\(condition)") {
                try await harness.write { update in
                    _ = try update.fetchOrCreate(type, condition)
                    try update.commit()
                }
            }
            #expect(error?.code == .typeMismatch, "\(condition)")
        }
        #expect(try harness.world.fetchCount(Sample.self) == 0 && harness.world.fetchCount(Person.self) == 0)
        try await harness.write { update in
            let sample = try update.fetchOrCreate(Sample.self, %"int16" == -32_768 && %"flag" == true && %"optionalInt" == nil)
            #expect(sample.int16 == -32_768 && sample.flag && sample.optionalInt == nil)
            try update.commit()
        }
        #expect(try harness.world.fetchCount(Sample.self, %"int16" == -32_768 && %"flag" == true) == 1)
    }
}

@Suite struct FetchOrCreateMissingTargetTests {
    @Test(arguments: Setup.all) @MainActor
    func aMissingRelationshipTargetThrowsBeforeCreating(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        let gone = try await harness.write { update in
            let person = try update.create(Person.self)
            try update.commit()
            try update.delete(person)
            try update.commit()
            return person.objectID
        }
        await #expect {
            try await harness.write { update in
                _ = try update.fetchOrCreate(Pet.self, %"owner" == gone)
                try update.commit()
            }
        } throws: { error in
            (error as? QueryError)?.code == .objectNotFound
        }
        #expect(try world.fetchCount(Pet.self) == 0)
    }
}
