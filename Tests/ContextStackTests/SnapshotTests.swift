@testable import ContextStack
import _ContextStackCore
import _ContextStackSQLite
@testable import _ContextStackModel
import Dispatch
import Foundation
import Testing

/// Snapshots (`@Entity`'s `Snapshot`), the async reads and `update.apply(_:expecting:)`, on
/// every topology and every store.
@Suite struct SnapshotTests {
    /// Ann (30, Kyoto, a friend Bob, pets Rex and Tom), Bob (20, no pets), Cy (15).
    struct People: Sendable {
        let ann: ObjectID, bob: ObjectID, cy: ObjectID, rex: ObjectID, tom: ObjectID
    }

    static func makePeople(_ update: Update) throws -> People {
        let ann = try update.create(Person.self)
        ann.name = "Ann"; ann.age = 30; ann.location = "Kyoto"; ann.email = "ann@example.org"
        let bob = try update.create(Person.self)
        bob.name = "Bob"; bob.age = 20
        let cy = try update.create(Person.self)
        cy.name = "Cy"; cy.age = 15
        ann.friend = bob
        let rex = try update.create(Pet.self)
        rex.name = "Rex"; rex.owner = ann
        let tom = try update.create(Pet.self)
        tom.name = "Tom"; tom.owner = ann
        try update.commit()
        return People(ann: ann.objectID, bob: bob.objectID, cy: cy.objectID, rex: rex.objectID, tom: tom.objectID)
    }

    @Test(arguments: Setup.all) @MainActor
    func snapshotsAreReadFromRowsAndEqualTheObjectsSnapshots(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        let ids = try await harness.write(Self.makePeople)
        let context = try Context(stack: harness.stack)

        let page = try await context.snapshots(Person.self, %"age" >= 18, orderBy: .ascending("name"), options: .limit(50))
        #expect(page.map(\.name) == ["Ann", "Bob"])
        let ann = try #require(page.first)
        #expect(ann.id == ids.ann)
        #expect(ann.age == 30 && ann.location == "Kyoto" && ann.email == "ann@example.org")
        #expect(ann.friend == ids.bob)
        #expect(ann.pets == [ids.rex, ids.tom].sorted())
        #expect(page[1].friendOf == [ids.ann])
        #expect(page[1].pets.isEmpty && page[1].friend == nil && page[1].location == nil)

        // The same values as the objects' own snapshots, on the main context and in an update.
        let objects = try world.fetchAll(Person.self, %"age" >= 18, orderBy: .ascending("name"))
        #expect(objects.map(\.snapshot) == page)
        #expect(try await world.snapshots(Person.self, %"age" >= 18, orderBy: .ascending("name")) == page)
        let inUpdate = try harness.update { update in try update.fetchAll(Person.self, %"age" >= 18, orderBy: .ascending("name")).map(\.snapshot) }
        #expect(inUpdate == page)

        // Windows, and one object by ID.
        #expect(try await context.snapshots(Person.self, orderBy: .ascending("name"), options: .limit(1) | .offset(1)).map(\.name) == ["Bob"])
        #expect(try await context.snapshot(Person.self, id: ids.ann) == ann)
        #expect(try await world.snapshot(Pet.self, id: ids.rex)?.owner == ids.ann)
        // A Pet's ID asked for as a Person finds nothing.
        #expect(try await context.snapshot(Person.self, id: ids.rex) == nil)

        // Counts and aggregates.
        #expect(try await context.count(Person.self, %"age" > 18) == 2)
        #expect(try await world.count(Pet.self) == 2)
        #expect(try await context.aggregateValue(Person.self, .sum("age")) == .integer(65))
        let rows = try await world.aggregate(Person.self, .select("location") | .count("name", alias: "n"),
                                             orderBy: .ascending("location"), groupBy: %"location")
        #expect(rows.map { $0["location"] } == [.null, .text("Kyoto")])
        #expect(rows.map { $0["n"] } == [.integer(2), .integer(1)])
    }

    @Test(arguments: Setup.all) @MainActor
    func snapshotsSeeEveryCommitMadeBeforeTheCallAndNoPendingChanges(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let ids = try await harness.write(Self.makePeople)
        let context = try Context(stack: harness.stack)
        // Committed but perhaps not yet written (three-tier, two-tier): snapshots already see it.
        try harness.update { update in
            try #require(try update.fetch(Person.self, id: ids.cy)).age = 16
            try update.delete(try #require(try update.fetch(Pet.self, id: ids.tom)))
            try update.commit()
        }
        #expect(try await context.snapshot(Person.self, id: ids.cy)?.age == 16)
        #expect(try await context.snapshot(Person.self, id: ids.ann)?.pets == [ids.rex])
        #expect(try await context.snapshot(Pet.self, id: ids.tom) == nil)
        #expect(try await context.count(Pet.self) == 1)
        // Pending changes of an update are not seen.
        let open = harness.updater?.beginUpdateContext() ?? harness.world.beginUpdateContext()
        try open.performAndWait { update in try #require(try update.fetch(Person.self, id: ids.cy)).age = 99 }
        #expect(try await context.snapshot(Person.self, id: ids.cy)?.age == 16)
        #expect(try await harness.world.snapshots(Person.self, %"age" == 99).isEmpty)
        try open.performAndWait { $0.rollback() }
    }

    @Test(arguments: Setup.all) @MainActor
    func applyWritesAttributesAndRelationships(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let ids = try await harness.write(Self.makePeople)
        let context = try Context(stack: harness.stack)
        var edited = try #require(try await context.snapshot(Person.self, id: ids.bob))
        edited.age = 21
        edited.location = "Taipei"
        edited.friend = ids.cy
        edited.pets = [ids.tom]
        try await harness.transaction { [edited] update in try update.apply(edited) }
        try await harness.stack.flush()
        let bob = try #require(try await context.snapshot(Person.self, id: ids.bob))
        #expect(bob == edited)
        #expect(try await context.snapshot(Person.self, id: ids.ann)?.pets == [ids.rex])
        #expect(try await context.snapshot(Pet.self, id: ids.tom)?.owner == ids.bob)
        #expect(try await context.snapshot(Person.self, id: ids.cy)?.friendOf == [ids.bob])
        // The reading main context shows it like any commit.
        try await harness.settle()
        let held = try #require(try harness.world.fetch(Person.self, id: ids.bob))
        #expect(held.age == 21 && held.friend?.name == "Cy" && held.pets.map(\.name) == ["Tom"])

        // A snapshot equal to what is stored changes nothing: the update has no changes.
        let unchanged = try harness.update { update in
            try update.apply(bob)
            return try #require(try update.fetch(Person.self, id: ids.bob)).hasChanges
        }
        #expect(!unchanged)

        // Clearing: nil to-one, empty to-many.
        var cleared = bob
        cleared.friend = nil
        cleared.pets = []
        try await harness.transaction { [cleared] update in try update.apply(cleared) }
        try await harness.stack.flush()
        #expect(try await context.snapshot(Person.self, id: ids.bob) == cleared)
        #expect(try await context.snapshot(Pet.self, id: ids.tom)?.owner == nil)
    }

    @Test(arguments: Setup.all) @MainActor
    func applyExpectingRefusesALostUpdate(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let ids = try await harness.write(Self.makePeople)
        let context = try Context(stack: harness.stack)
        let original = try #require(try await context.snapshot(Person.self, id: ids.ann))
        var edited = original
        edited.name = "Anne"

        // Another writer changes the age after the client read.
        try await harness.transaction { update in try #require(try update.fetch(Person.self, id: ids.ann)).age = 31 }
        let error = await #expect(throws: MergeConflictError.self) {
            try await harness.transaction { [edited, original] update in try update.apply(edited, expecting: original) }
        }
        #expect(error?.conflicts.map(\.key) == ["age"])
        #expect(error?.description.contains("apply(_:expecting:)") == true, "the description says why, not the merge policy")
        #expect(error?.conflicts.first?.snapshot == .integer(30))
        #expect(error?.conflicts.first?.stored == .integer(31))
        try await harness.stack.flush()
        #expect(try await context.snapshot(Person.self, id: ids.ann)?.name == "Ann")

        // From a fresh read, the same edit goes through.
        let fresh = try #require(try await context.snapshot(Person.self, id: ids.ann))
        var again = fresh
        again.name = "Anne"
        try await harness.transaction { [again, fresh] update in try update.apply(again, expecting: fresh) }
        try await harness.stack.flush()
        #expect(try await context.snapshot(Person.self, id: ids.ann) == again)

        // A to-many change underneath is a conflict too.
        try await harness.transaction { update in try #require(try update.fetch(Pet.self, id: ids.tom)).owner = nil }
        let members = await #expect(throws: MergeConflictError.self) {
            try await harness.transaction { [again, fresh] update in
                var renamed = again
                renamed.name = "Annie"
                try update.apply(renamed, expecting: again)
                _ = fresh
            }
        }
        #expect(members?.conflicts.map(\.key) == ["pets"])

        // A deleted object.
        try await harness.transaction { update in try update.delete(try #require(try update.fetch(Person.self, id: ids.cy))) }
        let cy = Person.Snapshot(id: ids.cy, name: "Cy", age: 15, location: nil, email: nil, friend: nil, friendOf: [], pets: [])
        let deleted = await #expect(throws: MergeConflictError.self) {
            try await harness.transaction { update in try update.apply(cy, expecting: cy) }
        }
        #expect(deleted?.conflicts.map(\.key) == ["<deleted>"])
        #expect(deleted?.description.contains("apply(_:expecting:)") == true)
    }

    /// The check happens again when the commit is saved: a change made between `apply` and
    /// `commit()` is a conflict even under `.objectTrump`, which otherwise overwrites it.
    @Test(arguments: Setup.all) @MainActor
    func applyExpectingChecksAgainWhenTheCommitIsSaved(setup: Setup) async throws {
        try await checksAgainWhenSaved(TopologyHarness(setup))
    }

    /// README, "Servers": checked again when the commit is saved "whatever the merge policy":
    /// none of them resolves such a conflict (`.storeTrump` would keep the stored location and
    /// save the age, `.rollback` would drop the change, `.overwrite` would write it all).
    @Test(arguments: StoreKind.available, [MergePolicy.storeTrump, .overwrite, .rollback, .error]) @MainActor
    func applyExpectingChecksAgainUnderEveryMergePolicy(kind: StoreKind, policy: MergePolicy) async throws {
        try await checksAgainWhenSaved(TopologyHarness(.threeTier, kind: kind, policy: policy))
    }

    /// `apply(_:expecting:)` in an update, then another commit changes the object, then the
    /// update commits: a conflict, and the other commit's values stay.
    @MainActor private func checksAgainWhenSaved(_ harness: TopologyHarness) async throws {
        let ids = try await harness.write(Self.makePeople)
        let context = try Context(stack: harness.stack)
        let original = try #require(try await context.snapshot(Person.self, id: ids.bob))
        var edited = original
        edited.age = 40
        let slow = harness.updater?.beginUpdateContext() ?? harness.world.beginUpdateContext()
        try slow.performAndWait { update in try update.apply(edited, expecting: original) }
        try await harness.transaction { update in try #require(try update.fetch(Person.self, id: ids.bob)).location = "Lima" }
        let error = #expect(throws: MergeConflictError.self) {
            try slow.performAndWait { update in try update.commit() }
        }
        // Under a policy other than `.error`, the description says why instead of naming it.
        #expect(error?.description.contains(harness.world.mergePolicy == .error ? "merge policy .error" : "apply(_:expecting:)") == true,
                "\(String(describing: error))")
        try await harness.stack.flush()
        let stored = try #require(try await context.snapshot(Person.self, id: ids.bob))
        #expect(stored.age == 20 && stored.location == "Lima")
    }

    /// The second check covers the rows of the members a to-many change moves, too: a
    /// one-to-many membership is the member's row. One request takes Rex from Ann, another
    /// gives Rex to Bob meanwhile; the first one's commit is a conflict, not a silent undoing
    /// of the second (Rex ownerless). The same for a member added whose owner changed meanwhile.
    @Test(arguments: Setup.all) @MainActor
    func applyExpectingChecksTheMovedMembersRowsAgainWhenSaved(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let ids = try await harness.write(Self.makePeople)
        let context = try Context(stack: harness.stack)
        // (whose pets the request sets, to what; the pet another request gives Bob meanwhile)
        let cases: [(String, ObjectID, [ObjectID], ObjectID)] = [("a member removed", ids.ann, [ids.tom], ids.rex),
                                                                 ("a member added", ids.cy, [ids.tom], ids.tom)]
        for (label, owner, pets, moved) in cases {
            let original = try #require(try await context.snapshot(Person.self, id: owner))
            var edited = original
            edited.pets = pets
            let slow = harness.updater?.beginUpdateContext() ?? harness.world.beginUpdateContext()
            try slow.performAndWait { update in try update.apply(edited, expecting: original) }
            try await harness.transaction { update in
                let bob = try #require(try update.fetch(Person.self, id: ids.bob))
                try #require(try update.fetch(Pet.self, id: moved)).owner = bob
            }
            #expect(throws: MergeConflictError.self, "\(label)") {
                try slow.performAndWait { update in try update.commit() }
            }
            try await harness.stack.flush()
            #expect(try await context.snapshot(Pet.self, id: moved)?.owner == ids.bob, "\(label)")
        }
    }

    /// Docs/Servers.md, "Writing from snapshots": a delete saved after `apply(_:expecting:)`
    /// found the objects, and before the commit is written, fails the commit — with
    /// `MergeConflictError` (`"<deleted>"`) when it deleted a row the commit changes (the
    /// object itself, or a member a to-many moves), with `relatesToDeletedObject` when it
    /// deleted the object a to-one names — and the delete stands.
    @Test(arguments: Setup.all) @MainActor
    func aDeleteSavedAfterApplyFailsTheCommit(setup: Setup) async throws {
        for deleted in ["the object", "a member it moves", "the object a to-one names"] {
            let harness = try TopologyHarness(setup)
            let ids = try await harness.write(Self.makePeople)
            let context = try Context(stack: harness.stack)
            let original = try #require(try await context.snapshot(Person.self, id: ids.bob))
            var edited = original
            edited.age = 21     // stored only if the commit were, in part
            let gone: ObjectID
            switch deleted {
            case "the object": gone = ids.bob
            case "a member it moves": edited.pets = [ids.tom]; gone = ids.tom
            default: edited.friend = ids.cy; gone = ids.cy
            }
            let slow = harness.updater?.beginUpdateContext() ?? harness.world.beginUpdateContext()
            try slow.performAndWait { update in try update.apply(edited, expecting: original) }
            try await harness.transaction { update in
                if gone.entityName == "Pet" {
                    try update.delete(try #require(try update.fetch(Pet.self, id: gone)))
                } else {
                    try update.delete(try #require(try update.fetch(Person.self, id: gone)))
                }
            }
            let error = await #expect(throws: (any Error).self, "\(deleted)") {
                try slow.performAndWait { update in try update.commit() }
                try await harness.stack.flush()
            }
            if deleted == "the object a to-one names" {
                #expect((error as? SaveError)?.code == .relatesToDeletedObject, "\(deleted): \(String(describing: error))")
            } else {
                #expect((error as? MergeConflictError)?.conflicts.map(\.key) == ["<deleted>"], "\(deleted): \(String(describing: error))")
            }
            try? await harness.stack.flush()
            #expect(try await context.snapshot(Person.self, id: ids.bob)?.age == (deleted == "the object" ? nil : 20), "\(deleted)")
            #expect(try await context.count(Pet.self, %"name" == "Tom") == (deleted == "a member it moves" ? 0 : 1), "\(deleted)")
        }
    }

    @Test(arguments: Setup.all) @MainActor
    func applyNamingAMissingObjectChangesNothing(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let ids = try await harness.write(Self.makePeople)
        let context = try Context(stack: harness.stack)
        try await harness.transaction { update in try update.delete(try #require(try update.fetch(Pet.self, id: ids.tom))) }
        var edited = try #require(try await context.snapshot(Person.self, id: ids.bob))
        edited.age = 50
        edited.pets = [ids.tom]
        let error = await #expect(throws: MergeConflictError.self) {
            try await harness.transaction { [edited] update in
                do {
                    try update.apply(edited)
                } catch {
                    // Nothing was changed before the error.
                    #expect(try update.fetch(Person.self, id: ids.bob)?.hasChanges == false)
                    throw error
                }
            }
        }
        #expect(error?.conflicts.map(\.ours) == [.text(ids.tom.description)])
        #expect(try await context.snapshot(Person.self, id: ids.bob)?.age == 20)
    }

    @Test @MainActor func snapshotsRoundTripThroughJSON() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let ids = try world.beginUpdateAndWait(Self.makePeople)
        let ann = try #require(try world.fetch(Person.self, id: ids.ann)).snapshot
        let json = try JSONEncoder().encode(ann)
        #expect(try JSONDecoder().decode(Person.Snapshot.self, from: json) == ann)
        let object = try #require(try JSONSerialization.jsonObject(with: json) as? [String: Any])
        #expect(object["id"] as? String == ids.ann.description)
        #expect(object["friend"] as? String == ids.bob.description)
        #expect(object["pets"] as? [String] == [ids.rex, ids.tom].sorted().map(\.description))

        // Every attribute type, optionals and enums included.
        let sample = try world.beginUpdateAndWait { update in
            let sample = try update.create(Sample.self)
            sample.flag = true; sample.int16 = -3; sample.double = 2.5; sample.date = Date(timeIntervalSince1970: 12.25)
            sample.data = Data([1, 2, 3]); sample.decimal = Decimal(string: "1.10")!; sample.mood = .grumpy; sample.level = .high
            sample.optionalMood = .cheerful; sample.optionalString = "x"; sample.optionalURL = URL(string: "https://swift.org")
            try update.commit()
            return sample.snapshot
        }
        let decoded = try JSONDecoder().decode(Sample.Snapshot.self, from: JSONEncoder().encode(sample))
        #expect(decoded == sample)
        #expect(decoded.mood == .grumpy && decoded.optionalMood == .cheerful && decoded.optionalInt == nil)

        // A missing optional is nil; an ID of another entity, or not an ID, is refused.
        let minimal = Data(#"{"id": "Pet/7", "name": "Rex", "age": 3}"#.utf8)
        let pet = try JSONDecoder().decode(Pet.Snapshot.self, from: minimal)
        #expect(pet.owner == nil && pet.id.primaryKey == 7)
        let person = try JSONDecoder().decode(Person.Snapshot.self, from: Data(#"{"id": "Person/3", "name": "Ann", "age": 30}"#.utf8))
        #expect(person.pets.isEmpty && person.friendOf.isEmpty && person.friend == nil && person.location == nil)
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(Pet.Snapshot.self, from: Data(#"{"id": "Person/7", "name": "Rex", "age": 3}"#.utf8))
        }
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(Pet.Snapshot.self, from: Data(#"{"id": "Pet/7", "name": "Rex", "age": 3, "owner": "7"}"#.utf8))
        }
        // Docs/Servers.md, "Writes from values": a body that leaves out a non-optional
        // attribute does not decode, nor does a to-many naming another entity's object.
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(Person.Snapshot.self, from: Data(#"{"id": "Person/3", "name": "Ann"}"#.utf8))
        }
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(Person.Snapshot.self, from: Data(#"{"id": "Person/3", "name": "Ann", "age": 30, "pets": ["Person/1"]}"#.utf8))
        }
    }

    /// A snapshot read on a main context that does not merge shows the latest state, not the
    /// context's pinned view; `person.snapshot` in an update includes its pending changes
    /// (Docs/Servers.md, "Snapshots" and "Async reads").
    @Test @MainActor func snapshotReadsShowTheLatestStateAndAnObjectsSnapshotItsPendingChanges() async throws {
        let store = try TestStore(.file, rootContext: .shared)
        let pinned = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        let ids = try pinned.beginUpdateAndWait(Self.makePeople)
        try store.stack.flushAndWait()
        let other = try MainContext(stack: store.stack)
        try other.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: ids.bob)).age = 21
            try update.commit()
        }
        #expect(try pinned.fetch(Person.self, id: ids.bob)?.age != 21, "the context's own view is pinned")
        #expect(try await pinned.snapshot(Person.self, id: ids.bob)?.age == 21)
        try pinned.beginUpdateAndWait { update in
            let bob = try #require(try update.fetch(Person.self, id: ids.bob))
            bob.location = "Lima"
            #expect(bob.snapshot.location == "Lima" && bob.snapshot.age == 21)
        }
    }

    @Test @MainActor func objectIDsRoundTripThroughStrings() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        let ids = try world.beginUpdateAndWait(Self.makePeople)
        #expect(ObjectID(ids.ann.description) == ids.ann)
        #expect(ObjectID(ids.rex.description) == ids.rex)
        #expect(ObjectID("Nobody/1") == nil)
        #expect(ObjectID("Engineer/1") == nil, "a sub-entity's name: IDs name the top of a hierarchy")
        #expect(ObjectID("Staff/1")?.entityName == "Staff")
        #expect(ObjectID("Person/x") == nil)
        #expect(ObjectID("Person") == nil)
        #expect(ObjectID("/1") == nil)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        let json = try encoder.encode([ids.ann, ids.rex])
        #expect(String(decoding: json, as: UTF8.self) == #"["\#(ids.ann)","\#(ids.rex)"]"#)
        #expect(try JSONDecoder().decode([ObjectID].self, from: json) == [ids.ann, ids.rex])
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(ObjectID.self, from: Data(#""Nobody/1""#.utf8)) }
    }

    /// Snapshots read straight from a statement's columns make exactly what the objects'
    /// values make, whatever the columns hold: a column of another storage class than its
    /// attribute's (SQLite lets another program write one), or NULL in a non-optional column,
    /// takes the path through `Value` and its conversions and defaults, as objects do.
    @Test @MainActor func snapshotsFromColumnsMatchObjectsWhateverTheColumnsHold() async throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for index in 0..<3 {
                let sample = try update.create(Sample.self)
                sample.int = index; sample.string = "s\(index)"; sample.optionalString = "o\(index)"
                sample.double = Double(index) + 0.5; sample.optionalInt = index; sample.flag = true
            }
            try update.commit()
        }
        try await store.stack.flush()
        let db = try store.rawConnection()
        // Row 2: each column holds another storage class than its attribute's; row 3: NULLs.
        try db.execute("""
            UPDATE Sample SET int = 2.5, int64 = '7', double = 7, string = 12, flag = 2.0, date = 'noon',
                optionalInt = 'x', optionalDouble = 3, optionalString = 4.5, optionalDate = 'later', optionalFlag = 'yes'
            WHERE Z_PK = (SELECT Z_PK FROM Sample ORDER BY Z_PK LIMIT 1 OFFSET 1);
            UPDATE Sample SET int = NULL, int64 = NULL, double = NULL, string = NULL, flag = NULL, date = NULL
            WHERE Z_PK = (SELECT Z_PK FROM Sample ORDER BY Z_PK LIMIT 1 OFFSET 2)
            """)
        let snapshots = try await world.snapshots(Sample.self)
        let objects = try MainContext(stack: store.stack).fetchAll(Sample.self)
        #expect(snapshots.count == 3)
        #expect(Set(snapshots) == Set(objects.map(\.snapshot)))
        let byKey = snapshots.sorted { $0.id < $1.id }
        let (odd, nulls) = (byKey[1], byKey[2])
        // A REAL in an integer column truncates; text where a number or date belongs makes the
        // default, or nil when optional (SQLite's affinity turned 12 into "12" and '7' into 7).
        #expect(odd.int == 2 && odd.int64 == 7 && odd.string == "12" && odd.flag)
        #expect(odd.date == Date(timeIntervalSince1970: 0) && odd.optionalDate == nil && odd.optionalInt == nil)
        #expect(odd.optionalDouble == 3 && odd.optionalString == "4.5")
        #expect(nulls.int == 0 && nulls.string == "default" && !nulls.flag && nulls.optionalString == "o2")
    }

    /// `apply(_:expecting:)` compares the stored values as a snapshot reads them. A row another
    /// program wrote in another form than ContextStack writes (`"12.50"` in a decimal, `2.0`
    /// in a `Bool` column, `2.5` in an `Int` one, NULL in a non-optional string, an enum's raw
    /// value that is none of its cases) takes an
    /// apply that expects what a client read of it, through JSON; before, every such apply
    /// conflicted, and the row could never be changed that way. A value that really changed
    /// since still conflicts.
    @Test @MainActor func applyExpectingComparesStoredValuesAsASnapshotReadsThem() async throws {
        let store = try TestStore(.file)
        try Context(stack: store.stack, updateTarget: .persistentStore).beginUpdateAndWait { update in
            _ = try update.create(Sample.self)
            try update.commit()
        }
        let db = try store.rawConnection()
        try db.execute("UPDATE Sample SET decimal = '12.50', flag = 2.0, int = 2.5, string = NULL, mood = 'legacy', level = 7")
        let world = try MainContext(stack: store.stack)
        let read = try #require(try await world.snapshots(Sample.self).first)
        #expect(read.decimal == Decimal(string: "12.5") && read.flag && read.int == 2 && read.string == "default")
        #expect(read.mood == .calm && read.level == .low)
        let original = try JSONDecoder().decode(Sample.Snapshot.self, from: JSONEncoder().encode(read))
        var edited = original
        edited.optionalString = "edited"
        try Context(stack: store.stack, updateTarget: .persistentStore).beginUpdateAndWait { update in
            try update.apply(edited, expecting: original)
            try update.commit()
        }
        #expect(try db.rows("SELECT optionalString, decimal FROM Sample") == [[.text("edited"), .text("12.50")]])

        try db.execute("UPDATE Sample SET decimal = '13'")
        var again = edited
        again.optionalString = "again"
        #expect(throws: MergeConflictError.self) {
            try Context(stack: store.stack, updateTarget: .persistentStore).beginUpdateAndWait { update in
                try update.apply(again, expecting: edited)
                try update.commit()
            }
        }
    }

    /// A window (`limit`, `offset`) of snapshots read straight from the statement's columns
    /// (nothing pending, no to-many relationship) holds what the same window of objects holds,
    /// past the end too; and after a commit that moves rows across the windows, written or
    /// still queued for the writer (then the rows are merged with it first).
    @Test(arguments: StoreKind.available) @MainActor
    func windowsOfSnapshotsMatchTheSameWindowsOfObjects(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for index in 0..<12 {
                let sample = try update.create(Sample.self)
                (sample.int, sample.string, sample.optionalString) = (index, "s\(index)", index.isMultiple(of: 3) ? nil : "o\(index)")
            }
            try update.commit()
        }
        try await store.stack.flush()
        let windows: [FetchOptions] = [.limit(3), .limit(3) | .offset(2), .limit(5) | .offset(9), .offset(7), .limit(4) | .offset(20)]
        func expectWindowsMatch(_ comment: Comment) async throws {
            for window in windows {
                let snapshots = try await world.snapshots(Sample.self, %"int" >= 1, orderBy: .descending("int"), options: window)
                // A context of its own: what the store holds, whatever `world` merged so far.
                let objects = try MainContext(stack: store.stack).fetchAll(Sample.self, %"int" >= 1, orderBy: .descending("int"), options: window)
                #expect(snapshots == objects.map(\.snapshot), comment)
            }
        }
        try await expectWindowsMatch("read from the columns")
        #expect(try await world.snapshots(Sample.self, %"int" >= 1, orderBy: .descending("int"), options: .limit(3) | .offset(2)).map(\.int) == [9, 8, 7])
        // A commit that moves rows in and out of the windows, held in the writer's queue (the
        // queue suspended) while the windows are read.
        let queued = try #require(store.stack.store as? any QueuedStore)
        queued.writeQueue.sync {}
        queued.writeQueue.suspend()
        let other = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        try other.beginUpdateAndWait { update in
            for sample in try update.fetchAll(Sample.self, %"int" >= 9) { sample.int -= 20 }
            try update.commit()
        }
        #expect(queued.state.withLock { !$0.overlay.isEmpty }, "the commit waits for the writer")
        try await expectWindowsMatch("merged with a queued commit")
        queued.writeQueue.resume()
        try await store.stack.flush()
        try await expectWindowsMatch("written")
    }

    /// A sub-entity shares its root's snapshot: the root's properties, for objects of the
    /// sub-entity only.
    @Test(arguments: StoreKind.available) @MainActor
    func subEntitiesShareTheRootsSnapshot(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let team = try world.beginUpdateAndWait { update in
            let team = try update.create(Team.self)
            team.title = "Core"
            let engineer = try update.create(Engineer.self)
            engineer.name = "Eve"
            engineer.team = team
            try update.create(Manager.self).name = "Max"
            try update.commit()
            return team.objectID
        }
        let engineers: [Staff.Snapshot] = try await world.snapshots(Engineer.self)
        #expect(engineers.map(\.name) == ["Eve"])
        #expect(engineers.first?.team == team)
        #expect(try await world.snapshots(Staff.self, orderBy: .ascending("name")).map(\.name) == ["Eve", "Max"])
        #expect(try await world.snapshot(Team.self, id: team)?.members.count == 1)
        let eve = try #require(engineers.first)
        #expect(try await world.snapshot(Manager.self, id: eve.id) == nil)
        #expect(try world.fetch(Engineer.self)?.snapshot == eve)

        // Docs/Servers.md, "Reading": `.noSubEntities` applies; the options that shape objects
        // change nothing for snapshots (every property is read, the team included).
        try world.beginUpdateAndWait { update in
            try update.create(Staff.self).name = "Sam"
            try update.commit()
        }
        #expect(try await world.snapshots(Staff.self, options: .noSubEntities).map(\.name) == ["Sam"])
        let all = try await world.snapshots(Staff.self, orderBy: .ascending("name"))
        #expect(all.map(\.name) == ["Eve", "Max", "Sam"])
        for options in [FetchOptions.batch(1), .prefetch(["team"]), .propertiesOnly(["name"])] {
            #expect(try await world.snapshots(Staff.self, orderBy: .ascending("name"), options: options) == all, "\(options)")
        }
    }

    /// A store of `kind` with Ann written, and Bob committed to the root while a thread of its
    /// own holds the writer: Bob stays queued, unwritten, until `release` is signalled.
    private func annWrittenAndBobQueued(_ kind: StoreKind) async throws -> (store: TestStore, ann: ObjectID, release: DispatchSemaphore) {
        let store = try TestStore(kind)
        let context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        let ann = try context.beginUpdateAndWait { update in
            let ann = try update.create(Person.self)
            ann.name = "Ann"
            try update.commit()
            return ann.objectID
        }
        try await store.stack.flush()
        let held = Locked(false)
        let release = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            try? store.holdingTheWriter {
                try context.beginUpdateAndWait { update in
                    try update.create(Person.self).name = "Bob"
                    try update.commit()
                }
                held.withLock { $0 = true }
                release.wait()
            }
        }
        while !held.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
        return (store, ann, release)
    }

    /// Docs/Servers.md, "Where they run": each async read has its own reader connection and
    /// never waits for the writer. With the writer held (a write in progress) and a commit
    /// queued behind it, `snapshots`, `snapshot(_:id:)` and `count` finish, and show the queued
    /// commit. (An in-memory store reads on its writer's connection, as the page says.)
    @Test(.timeLimit(.minutes(1)), arguments: StoreKind.available.filter { $0 != .memory })
    func asyncReadsDoNotWaitForTheWriter(kind: StoreKind) async throws {
        let (store, ann, release) = try await annWrittenAndBobQueued(kind)
        defer { release.signal() }

        let reader = try Context(stack: store.stack)
        #expect(try await reader.snapshots(Person.self, orderBy: .ascending("name")).map(\.name) == ["Ann", "Bob"])
        #expect(try await reader.snapshot(Person.self, id: ann)?.name == "Ann")
        #expect(try await reader.count(Person.self) == 2)
        let unwritten = try !store.overlayIsEmpty
        #expect(unwritten, "the writer wrote while held")
    }

    /// `flush()` and `transaction` wait without holding a thread of the cooperative pool, also
    /// when the writer holds the store's state lock (across a long `COMMIT`): more flushes than
    /// the pool has threads start while another thread holds that lock, and a task started
    /// after them still runs. Before, each flush blocked its pool thread on the lock.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func flushesWaitingForTheStateLockHoldNoPoolThread(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let context = try Context(stack: store.stack)
        _ = try context.beginUpdateAndWait(Self.makePeople)
        let queued = try #require(store.stack.store as? any QueuedStore)
        let stack = store.stack
        let (holding, ran) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let progressed = Locked(false)
        // The lock is held off the pool, and let go after a bound, so that a pool the flushes
        // block still gets it back and the test ends.
        Thread {
            queued.state.withLock { _ in
                holding.signal()
                let seen = ran.wait(timeout: .now() + 30) == .success
                progressed.withLock { $0 = seen }
            }
        }.start()
        holding.wait()
        let flushes = (0..<4 * ProcessInfo.processInfo.activeProcessorCount + 4).map { _ in
            Task.detached { try await stack.flush() }
        }
        Task.detached { ran.signal() }
        for flush in flushes { try await flush.value }
        #expect(progressed.withLock { $0 }, "a task ran while the flushes waited for the state lock")
    }

    /// An async aggregate waits for the commits handed over before it without holding a read
    /// thread: with the writer held and a commit queued behind it, as many aggregates as there
    /// are read threads wait, and a snapshot read still finishes (Docs/Servers.md). They held
    /// every read thread before, and the read waited for the writer behind them. Once the
    /// writer goes on, the aggregates count the queued commit.
    @Test(.timeLimit(.minutes(1)), arguments: StoreKind.available.filter { $0 != .memory })
    func aggregatesWaitingForTheWriterHoldNoReadThread(kind: StoreKind) async throws {
        let (store, _, release) = try await annWrittenAndBobQueued(kind)
        // Should the aggregates hold the read threads, the writer is let go after a while, so
        // that the test ends (and fails) rather than hangs.
        let releasedByWatchdog = Locked(false)
        let watchdog = Task.detached {
            try await Task.sleep(for: .seconds(15))
            releasedByWatchdog.withLock { $0 = true }
            release.signal()
        }
        let reader = try Context(stack: store.stack)
        let counts = (0..<ReadThreads.shared.limit).map { _ in
            Task { try await reader.aggregateValue(Person.self, .count("name")) }
        }
        // Until every aggregate waits for the writer; a bound, not a measure.
        for _ in 0..<2000 where store.writerWaiters < counts.count { try await Task.sleep(for: .milliseconds(5)) }
        #expect(try await reader.snapshots(Person.self, orderBy: .ascending("name")).map(\.name) == ["Ann", "Bob"])
        #expect(!releasedByWatchdog.withLock { $0 }, "the snapshot read waited for the writer")
        watchdog.cancel()
        if !releasedByWatchdog.withLock({ $0 }) { release.signal() }
        for count in counts { #expect(try await count.value == .integer(2)) }
    }

    /// Docs/Servers.md, "Async reads", Cancellation: an aggregate that waits for the commits on
    /// their way to the store checks cancellation again after that wait, so a task cancelled
    /// while it waited gets `CancellationError`, not the aggregate.
    @Test(.timeLimit(.minutes(1)), arguments: StoreKind.available.filter { $0 != .memory })
    func anAggregateCancelledWhileItWaitsForTheWriterThrowsCancellationError(kind: StoreKind) async throws {
        let (store, _, release) = try await annWrittenAndBobQueued(kind)
        let reader = try Context(stack: store.stack)
        let aggregate = Task { try await reader.aggregateValue(Person.self, .count("name")) }
        // Until the aggregate waits for the writer; a bound, not a measure.
        for _ in 0..<2000 where store.writerWaiters < 1 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(store.writerWaiters >= 1)
        aggregate.cancel()
        release.signal()
        await #expect(throws: CancellationError.self) { try await aggregate.value }
        #expect(try await reader.aggregateValue(Person.self, .count("name")) == .integer(2))
    }

    /// The async reads never need the main actor: they finish while it is blocked.
    @Test @MainActor func asyncReadsRunOffTheMainActor() throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        _ = try world.beginUpdateAndWait(Self.makePeople)
        let done = DispatchSemaphore(value: 0)
        let result = Locked<[String]?>(nil)
        Task.detached { [world] in
            let names = try? await world.snapshots(Person.self, orderBy: .ascending("name")).map(\.name)
            result.withLock { $0 = names }
            done.signal()
        }
        // Blocks the main actor; a read that hopped to it would never finish. (The timeout
        // only keeps a failure from hanging the run.)
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(result.withLock { $0 } == ["Ann", "Bob", "Cy"])
    }

    /// Every async read of Docs/Servers.md, "Async reads": `snapshots`, `snapshot(_:id:)`,
    /// `count`, `aggregate` and `aggregateValue`, on every store.
    @Test(arguments: StoreKind.available) func aCancelledTaskReadsNothing(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let context = try Context(stack: store.stack)
        let ann = try context.beginUpdateAndWait(Self.makePeople).ann
        let reads: [(String, @Sendable () async throws -> Void)] = [
            ("snapshots", { _ = try await context.snapshots(Person.self) }),
            ("snapshot", { _ = try await context.snapshot(Person.self, id: ann) }),
            ("count", { _ = try await context.count(Person.self) }),
            ("aggregate", { _ = try await context.aggregate(Person.self, .select("location") | .count("age"), groupBy: %"location") }),
            ("aggregateValue", { _ = try await context.aggregateValue(Person.self, .average("age")) }),
        ]
        for (name, read) in reads {
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                try await read()
            }
            await #expect(throws: CancellationError.self, "\(name)") { try await task.value }
        }
    }

    /// Docs/Servers.md, "Async reads", Where they run: on the library's own read threads, at
    /// most twice the cores (and at least four) for the process, never on the cooperative
    /// pool. Many concurrent reads, each statement noting the thread it runs on.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func asyncReadsRunOnTheLibrarysReadThreads(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let context = try Context(stack: store.stack)
        _ = try context.beginUpdateAndWait(Self.makePeople)
        try store.stack.flushAndWait()
        let threads = Locked<[(readThread: Bool, id: ObjectIdentifier)]>([])
        store.stack.trace { sql in
            guard sql.contains("\"Person\"") else { return }
            threads.withLock { $0.append((ReadThreads.isCurrent, ObjectIdentifier(Thread.current))) }
        }
        defer { store.stack.trace(nil) }
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<64 { group.addTask { try await context.snapshots(Person.self).count } }
            for try await count in group { #expect(count == 3) }
        }
        let seen = threads.withLock { $0 }
        #expect(seen.count >= 64)
        #expect(seen.allSatisfy { $0.readThread })
        #expect(Set(seen.map(\.id)).count <= max(4, 2 * ProcessInfo.processInfo.activeProcessorCount))
    }

    /// A read that finished lets go of its work while others still wait: on a busy server the
    /// queue of reads is never empty, and finished ones (their closures, with what they read)
    /// used to stay in it until it was. One thread; a thousand reads run while one more waits.
    @Test func aFinishedReadLetsGoOfItsWorkWhileOthersWait() {
        final class Work: Sendable {}
        struct Weak: Sendable { weak var value: Work? }
        let threads = ReadThreads(limit: 1)
        let (held, release, last) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        threads.submit {
            held.signal()
            release.wait()
        }
        held.wait()
        let finished = Locked<[Weak]>([])
        for _ in 0..<1000 {
            let work = Work()
            finished.withLock { $0.append(Weak(value: work)) }
            threads.submit { _ = work }
        }
        threads.submit {
            held.signal()
            last.wait()
        }
        threads.submit {}
        release.signal()
        held.wait()
        // The thousand ran; the last but one holds the thread, and one more waits.
        #expect(finished.withLock { $0.allSatisfy { $0.value == nil } }, "the finished reads' work is let go")
        #expect(threads.storedJobs < 100, "\(threads.storedJobs) jobs stored")
        last.signal()
    }

    /// Docs/Servers.md, "Async reads", Cancellation: once queued, a read runs to its end and
    /// returns its result, however the task is cancelled meanwhile. The statement trace holds
    /// the read on its read thread until the test has cancelled the task.
    @Test func aReadCancelledOnceQueuedFinishesAndReturnsItsResult() async throws {
        let store = try TestStore(.file)
        let context = try Context(stack: store.stack)
        _ = try context.beginUpdateAndWait(Self.makePeople)
        try store.stack.flushAndWait()
        let started = DispatchSemaphore(value: 0)
        let resume = DispatchSemaphore(value: 0)
        let first = Locked(true)
        store.stack.trace { sql in
            guard sql.contains("\"Person\""), first.withLock({ isFirst in defer { isFirst = false }; return isFirst }) else { return }
            started.signal()
            resume.wait()
        }
        defer { store.stack.trace(nil) }
        let task = Task.detached { try await context.snapshots(Person.self, orderBy: .ascending("name")).map(\.name) }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                started.wait()
                continuation.resume()
            }
        }
        task.cancel()
        resume.signal()
        #expect(try await task.value == ["Ann", "Bob", "Cy"])
    }

    /// Docs/Servers.md, "Writing": `transaction` does not observe cancellation. Called from a
    /// task already cancelled, its body runs and commits, it waits for the write and returns.
    @Test(arguments: StoreKind.available)
    func aTransactionOfACancelledTaskRunsCommitsAndReturns(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let context = try Context(stack: store.stack)
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await context.transaction { update in
                let ann = try update.create(Person.self)
                ann.name = "Ann"
                return ann.objectID
            }
        }
        let ann = try await task.value
        #expect(try store.writtenRows("SELECT \"name\" FROM \"Person\" WHERE \"Z_PK\" = \(ann.primaryKey)") == [[.text("Ann")]])
    }

    /// Many readers against writers that move age between two people in one commit: every
    /// snapshot read shows each commit wholly or not at all (the total never changes), with
    /// more concurrent reads than the cooperative pool has threads.
    @Test(arguments: StoreKind.available) @MainActor
    func concurrentSnapshotsSeeWholeCommits(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        // Serial updates: each read-modify-write sees the one before it (concurrent ones would
        // lose increments under .objectTrump, which is not what this test is about).
        let context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false), updateOrder: .serial)
        let (a, b) = try context.beginUpdateAndWait { update in
            let a = try update.create(Person.self)
            a.name = "a"; a.age = 500
            let b = try update.create(Person.self)
            b.name = "b"; b.age = 500
            try update.commit()
            return (a.objectID, b.objectID)
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<2 {
                group.addTask {
                    for step in 0..<100 {
                        try await context.transaction { update in
                            let from = try #require(try update.fetch(Person.self, id: (writer + step).isMultiple(of: 2) ? a : b))
                            let to = try #require(try update.fetch(Person.self, id: from.objectID == a ? b : a))
                            from.age -= 1
                            to.age += 1
                        }
                    }
                }
            }
            for _ in 0..<16 {
                group.addTask {
                    for _ in 0..<40 {
                        let pair = try await context.snapshots(Person.self, orderBy: .ascending("name"))
                        #expect(pair.count == 2 && pair.reduce(0) { $0 + $1.age } == 1000)
                        let total = try await context.aggregateValue(Person.self, .sum("age"))
                        #expect(total == .integer(1000))
                    }
                }
            }
            try await group.waitForAll()
        }
    }
}

/// A persisted property named `id` (or `snapshot`) would clash with the snapshot's own: such
/// an entity gets no `Snapshot`, and still compiles and works.
@Entity final class Ticket: ManagedObject {
    var id: Int = 0
}

@Entity final class Photo: ManagedObject {
    var snapshot: String = ""
}

@Suite struct SnapshotNamingTests {
    @Test func anEntityWithAnIDPropertyHasNoSnapshot() {
        let types: [ManagedObject.Type] = [Ticket.self, Photo.self, Person.self, Engineer.self]
        #expect(types.map { $0 is any SnapshotProviding.Type } == [false, false, true, true])
        // A sub-entity shares its root's.
        #expect(Engineer.Snapshot.self == Staff.Snapshot.self)
    }
}
