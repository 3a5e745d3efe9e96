@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Dispatch
import Foundation
import Testing

/// A compound constraint.
@Entity(unique: [["first", "last"]]) final class Member: ManagedObject {
    var first: String = ""
    var last: String = ""
    var note: String = ""
}

/// Constraints in a hierarchy: `serial` over every device, `number` over phones only, and a
/// tablet's own `number` column (shared by name) that is not unique.
@Entity class Device: ManagedObject {
    @Attribute(.unique) var serial: String?
}

@Entity final class Phone: Device {
    @Attribute(.unique) var number: String?
}

@Entity final class Tablet: Device {
    var number: String?
}

/// A constraint with a to-one key, and a single number key (Writing.md, "Declaring
/// constraints").
@Entity(unique: [["owner", "name"], ["code"]]) final class Insignia: ManagedObject {
    var name: String = ""
    var code: Double?
    @Relationship var owner: Person?
}

/// A compound constraint of a sub-entity with an inherited key; `Lens` shares the `model`
/// column but not the constraint.
@Entity class Instrument: ManagedObject {
    var maker: String = ""
}

@Entity(unique: [["maker", "model"]]) final class Camera: Instrument {
    var model: String?
}

@Entity final class Lens: Instrument {
    var model: String?
}

@Entity(unique: [["missing"]]) final class UnknownKeyEntity: ManagedObject {
    var name: String = ""
}

@Entity(unique: [["name", "name"]]) final class TwiceKeyEntity: ManagedObject {
    var name: String = ""
}

@Entity(unique: [["children"]]) final class ToManyKeyEntity: ManagedObject {
    @Relationship var children: Set<Pet>
}

let uniquenessTypes: [ManagedObject.Type] = fullModelTypes + [Member.self, Device.self, Phone.self, Tablet.self]

@Suite(.timeLimit(.minutes(5))) struct UniquenessTests {
    // MARK: The model and the schema

    /// Docs/Writing.md, "Uniqueness": a unique value is checked against every commit handed
    /// over, also one that waits to be written (a `.persistentStore` commit whose caller is
    /// blocked behind the writer): another context's commit of the same email fails at its
    /// `commit()`, and the waiting one is saved.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func aUniqueValueIsCheckedAgainstACommitWaitingToBeWritten(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let direct = try ContextStack.Context(stack: store.stack, updateTarget: .persistentStore)
        let other = try ContextStack.Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        // Blocks of keys reserved beforehand: reserving one takes the writer on SQLite.
        for context in [direct, other] {
            try context.beginUpdateAndWait { update in
                try update.create(Person.self).name = "first"
                try update.commit()
            }
        }
        try store.stack.flushAndWait()
        let firstDone = DispatchSemaphore(value: 0)
        try store.holdingTheWriter {
            let before = store.commitsHandedOver
            Thread.detachNewThread {
                do {
                    try direct.beginUpdateAndWait { update in
                        try update.create(Person.self).email = "x@example.org"
                        try update.commit()
                    }
                } catch {
                    recorder.record(error)
                }
                firstDone.signal()
            }
            for _ in 0..<60_000 where store.commitsHandedOver == before { usleep(1_000) }
            try #require(store.commitsHandedOver > before)
            let error = #expect(throws: SaveError.self) {
                try other.beginUpdateAndWait { update in
                    try update.create(Person.self).email = "x@example.org"
                    try update.commit()
                }
            }
            #expect(error?.code == .uniquenessViolated, "\(String(describing: error))")
        }
        firstDone.wait()
        try store.stack.flushAndWait()
        #expect(recorder.all.isEmpty, "\(recorder.all)")
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Person\" WHERE email = 'x@example.org'") == .integer(1))
    }

    @Test func uniqueKeysMustNameStoredProperties() throws {
        for (type, fragment) in [(UnknownKeyEntity.self as ManagedObject.Type, "'missing'"), (TwiceKeyEntity.self, "twice"),
                                 (ToManyKeyEntity.self, "to-many")] {
            do {
                _ = try Model(type, Pet.self, Person.self)
                Issue.record("\(type) should be rejected")
            } catch let error as ModelError {
                #expect(error.code == .invalidUniqueness)
                #expect(error.message.contains(fragment), "\(error.message)")
            }
        }
    }

    @Test func uniqueIndexesAreCreatedPerHierarchy() throws {
        let store = try TestStore(.file, types: uniquenessTypes)
        let sql = try store.rawConnection().rows("SELECT sql FROM sqlite_master WHERE type = 'index' AND sql LIKE 'CREATE UNIQUE%' ORDER BY name")
            .compactMap { $0[0].stringValue }
        let phoneCode = try #require(store.stack.graph.entity(named: "Phone")?.entityCode)
        #expect(sql == [
            #"CREATE UNIQUE INDEX "Z_Device_unique_serial" ON "Device" ("serial")"#,
            #"CREATE UNIQUE INDEX "Z_Member_unique_first_last" ON "Member" ("first", "last")"#,
            #"CREATE UNIQUE INDEX "Z_Person_unique_email" ON "Person" ("email")"#,
            "CREATE UNIQUE INDEX \"Z_Phone_unique_number\" ON \"Device\" (\"number\") WHERE \"Z_ENT\" IN (\(phoneCode))",
        ])
    }

    @Test func constraintsChangeTheModelHash() throws {
        #expect(try Model(Person.self, Pet.self).versionHash != Model(Member.self).versionHash)
        let plain = try Model(Device.self, Phone.self, Tablet.self).graph.schemaDescription
        #expect(plain.contains("unique Device serial") && plain.contains("unique Phone number"))
    }

    // MARK: Violations

    @Test(arguments: Setup.all) @MainActor
    func aDuplicateThrowsNamingEntityKeyAndValueAndSavesNothingOfTheCommit(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let monkID = try harness.update { update in
            let monk = try update.create(Person.self)
            monk.name = "Monk"
            monk.email = "monk@example.com"
            try update.commit()
            return monk.objectID
        }
        var impostorID: ObjectID?
        let error = #expect(throws: SaveError.self) {
            try harness.update { update in
                let pet = try update.create(Pet.self)
                pet.name = "Rex"
                let impostor = try update.create(Person.self)
                impostor.name = "Impostor"
                impostor.email = "monk@example.com"
                impostorID = impostor.objectID
                try update.commit()
            }
        }
        #expect(error?.code == .uniquenessViolated)
        #expect(error?.entityName == "Person")
        #expect(error?.keys == ["email"])
        #expect(error?.values == [.text("monk@example.com")])
        // Docs/Writing.md: the impostor first, then the holder of the value.
        #expect(error?.objects.count == 2 && error?.objects == [impostorID, monkID].compactMap { $0 })
        #expect(error?.message.contains("the same Person.email") == true)
        #expect(error?.message.contains("monk@example.com") == false)
        try await harness.stack.flush()
        try await harness.settle()
        #expect(try harness.world.fetchAll(Person.self).map(\.name) == ["Monk"])
        #expect(try harness.world.fetchCount(Pet.self) == 0)
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Pet\"") == .integer(0))
        // The store takes later commits as usual.
        try harness.update { update in
            try update.create(Person.self).email = "knight@example.com"
            try update.commit()
        }
        try await harness.stack.flush()
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Person\"") == .integer(2))
    }

    @Test(arguments: Setup.all) @MainActor
    func duplicatesInsideOneCommitThrow(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        let error = await #expect(throws: SaveError.self) {
            try await harness.write { update in
                try update.create(Person.self).email = "twin@example.com"
                try update.create(Person.self).email = "twin@example.com"
                try update.commit()
            }
        }
        #expect(error?.code == .uniquenessViolated)
        #expect(try world.fetchCount(Person.self) == 0)
    }

    /// After `commit()` throws `.uniquenessViolated`, the update's changes stay pending
    /// (Docs/Writing.md, "Uniqueness"): with the value mended, the same update commits them.
    @Test(arguments: Setup.all) @MainActor
    func aDuplicateLeavesTheChangesPendingToMendAndCommit(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            let first = try update.create(Person.self)
            (first.name, first.email) = ("First", "twin@example.com")
            let second = try update.create(Person.self)
            (second.name, second.email) = ("Second", "twin@example.com")
            let error = #expect(throws: SaveError.self) { try update.commit() }
            #expect(error?.code == .uniquenessViolated)
            #expect(try update.fetchCount(Person.self) == 2, "both are still pending")
            second.email = "second@example.com"
            try update.commit()
        }
        #expect(try world.fetchAll(Person.self, orderBy: .ascending("name")).map { $0.email } == ["twin@example.com", "second@example.com"])
    }

    @Test(arguments: Setup.all) @MainActor
    func changingAValueToOneInUseThrowsButSwapsAndReusesAreFine(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            for name in ["a", "b", "c"] {
                let person = try update.create(Person.self)
                person.name = name
                person.email = "\(name)@example.com"
            }
            try update.commit()
        }
        await #expect(throws: SaveError.self) {
            try await harness.write { update in
                try #require(try update.fetch(Person.self, %"name" == "a")).email = "b@example.com"
                try update.commit()
            }
        }
        try await harness.write { update in
            // Swap a and b in one commit; delete c and give its address to a new person.
            let a = try #require(try update.fetch(Person.self, %"name" == "a"))
            let b = try #require(try update.fetch(Person.self, %"name" == "b"))
            (a.email, b.email) = (b.email, a.email)
            try update.delete(#require(try update.fetch(Person.self, %"name" == "c")))
            let d = try update.create(Person.self)
            d.name = "d"
            d.email = "c@example.com"
            try update.commit()
        }
        try await harness.stack.flush()
        let emails = try world.fetchAll(Person.self, orderBy: .ascending("name")).map { "\($0.name):\($0.email ?? "-")" }
        #expect(emails == ["a:b@example.com", "b:a@example.com", "d:c@example.com"])
    }

    @Test(arguments: Setup.all) @MainActor
    func nilNeverConflicts(setup: Setup) async throws {
        let harness = try TopologyHarness(setup, types: uniquenessTypes)
        let world = harness.world
        try await harness.write { update in
            for _ in 0..<3 { try update.create(Person.self).email = nil }
            try update.create(Phone.self)
            try update.create(Phone.self)
            try update.commit()
        }
        #expect(try world.fetchCount(Person.self) == 3)
    }

    @Test(arguments: Setup.all) @MainActor
    func compoundKeysConflictOnlyAsAWhole(setup: Setup) async throws {
        let harness = try TopologyHarness(setup, types: uniquenessTypes)
        let world = harness.world
        try await harness.write { update in
            for (first, last) in [("Ada", "Lovelace"), ("Ada", "Byron"), ("Grace", "Lovelace")] {
                let member = try update.create(Member.self)
                member.first = first
                member.last = last
            }
            try update.commit()
        }
        let error = await #expect(throws: SaveError.self) {
            try await harness.write { update in
                let member = try update.create(Member.self)
                member.first = "Ada"
                member.last = "Lovelace"
                try update.commit()
            }
        }
        #expect(error?.keys == ["first", "last"])
        #expect(error?.values == [.text("Ada"), .text("Lovelace")])
        #expect(error?.message.contains("Member.(first, last)") == true)
        #expect(try world.fetchCount(Member.self) == 3)
    }

    /// Writing.md, "Declaring constraints": a key may be a to-one relationship or an inherited
    /// attribute; a compound key with a `nil` in it never conflicts; numbers compare by value,
    /// so a batch's `1` is an object's `1.0`.
    @Test(arguments: Setup.all) @MainActor
    func keysMayBeToOnesOrInheritedAndACompoundWithANilNeverConflicts(setup: Setup) async throws {
        let harness = try TopologyHarness(setup, types: fullModelTypes + [Insignia.self, Instrument.self, Camera.self, Lens.self])
        let world = harness.world
        let (ann, bob) = try await harness.write { update in
            let ann = try update.create(Person.self)
            let bob = try update.create(Person.self)
            for (owner, name) in [(ann, "gold"), (bob, "gold"), (ann, "silver"), (nil, "gold"), (nil, "gold")] as [(Person?, String)] {
                let badge = try update.create(Insignia.self)
                (badge.owner, badge.name) = (owner, name)
            }
            try update.create(Insignia.self).code = 1.0
            for (maker, model) in [("Leica", "M6"), ("Leica", nil), ("Leica", nil), ("Nikon", "M6")] as [(String, String?)] {
                let camera = try update.create(Camera.self)
                (camera.maker, camera.model) = (maker, model)
            }
            let lens = try update.create(Lens.self)
            (lens.maker, lens.model) = ("Leica", "M6")
            try update.commit()
            return (ann.objectID, bob.objectID)
        }
        _ = bob
        let badge = await #expect(throws: SaveError.self) {
            try await harness.write { update in
                let badge = try update.create(Insignia.self)
                (badge.owner, badge.name) = (try update.fetch(Person.self, id: ann), "gold")
                try update.commit()
            }
        }
        #expect(badge?.code == .uniquenessViolated && badge?.keys == ["owner", "name"])
        let camera = await #expect(throws: SaveError.self) {
            try await harness.write { update in
                let camera = try update.create(Camera.self)
                (camera.maker, camera.model) = ("Leica", "M6")
                try update.commit()
            }
        }
        #expect(camera?.code == .uniquenessViolated && camera?.entityName == "Camera" && camera?.keys == ["maker", "model"])
        let number = #expect(throws: SaveError.self) {
            try harness.update { update in try update.batchInsert(Insignia.self, [["name": "one", "code": .integer(1)]]) }
        }
        #expect(number?.code == .uniquenessViolated)
        try await harness.stack.flush()
        #expect(try world.fetchCount(Insignia.self) == 6)
        #expect(try world.fetchCount(Camera.self) == 4)
        #expect(try world.fetchCount(Instrument.self) == 5)
    }

    @Test @MainActor func subEntityConstraintsCoverTheirOwnFamily() async throws {
        let store = try TestStore(.file, types: uniquenessTypes)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let phone = try update.create(Phone.self)
            phone.serial = "S1"
            phone.number = "555"
            // A tablet's `number` shares the column but not the constraint.
            let tablet = try update.create(Tablet.self)
            tablet.serial = "S2"
            tablet.number = "555"
            try update.commit()
        }
        let phone = #expect(throws: SaveError.self) {
            try world.beginUpdateAndWait { update in
                try update.create(Phone.self).number = "555"
                try update.commit()
            }
        }
        #expect(phone?.entityName == "Phone")
        // `serial` is declared on Device: a tablet and a phone cannot share one.
        let serial = #expect(throws: SaveError.self) {
            try world.beginUpdateAndWait { update in
                try update.create(Tablet.self).serial = "S1"
                try update.commit()
            }
        }
        #expect(serial?.entityName == "Device")
        try world.beginUpdateAndWait { update in
            try update.create(Tablet.self).number = "555"
            try update.commit()
        }
        try await store.stack.flush()
        #expect(try store.rawConnection().scalar("SELECT count(*) FROM Device WHERE number = '555'") == .integer(3))
    }

    @Test @MainActor func aFireAndForgetViolationGoesToOnError() async throws {
        let store = try TestStore(.file)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).email = "x@example.com"
            try update.commit()
        }
        let done = DispatchSemaphore(value: 0)
        world.beginUpdate { update in
            defer { done.signal() }
            try update.create(Person.self).email = "x@example.com"
            try update.commit()
        }
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { done.wait(); continuation.resume() }
        }
        try await store.stack.flush()
        #expect(recorder.all.count == 1)
        #expect((recorder.all.first as? SaveError)?.code == .uniquenessViolated)
        #expect(try world.fetchCount(Person.self) == 1)
    }

    @Test func aUniqueIndexFailureFromAnotherWriterBecomesASaveError() throws {
        let store = try TestStore(.file)
        let db = try store.rawConnection()
        try db.execute("INSERT INTO Person (Z_PK, name, age, email) VALUES (1000, 'a', 0, 'x')")
        do {
            try db.execute("INSERT INTO Person (Z_PK, name, age, email) VALUES (1001, 'b', 0, 'x')")
            Issue.record("SQLite should refuse the duplicate")
        } catch {
            let mapped = store.stack.sqliteStore.saveError(error)
            let saveError = try #require(mapped as? SaveError)
            #expect(saveError.code == .uniquenessViolated)
            #expect(saveError.entityName == "Person")
            #expect(saveError.keys == ["email"])
        }
    }
}
