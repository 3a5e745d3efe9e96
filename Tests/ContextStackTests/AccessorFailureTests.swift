@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// Property accessors cannot throw. When one has to read the store and the read fails, the
/// error goes to `stack.onError`, and the update context refuses its next commit with it:
/// what the accessor returned or changed may be incomplete, and saving it could write a
/// wrong relationship.
@Suite struct AccessorFailureTests {
    /// Makes every read of `table` fail from now on, while writes to other tables work: an
    /// in-memory store reads through its writer connection, where a temporary view of the same
    /// name hides the table from unqualified reads and fails when evaluated.
    static func breakReads(of table: String, in store: TestStore) throws {
        try store.stack.sqliteStore.writer.withLock { writer in
            try writer.connection.execute("""
                CREATE TEMP VIEW "\(table)" AS SELECT * FROM main."\(table)" WHERE json('not json') IS NOT NULL
                """)
        }
    }

    /// A to-one getter whose read fails returns `nil`; a change made after it is not saved.
    @Test func aFailedToOneReadStopsTheNextCommit() throws {
        let store = try TestStore(.memory)
        let errors = ErrorRecorder()
        store.stack.onError = errors.record
        let context = try Context(stack: store.stack, updateTarget: .persistentStore)
        try context.beginUpdateAndWait { update in
            let pet = try update.create(Pet.self)
            pet.name = "Rex"
            pet.owner = try update.create(Person.self)
            try update.commit()
        }
        let updater = context.beginUpdateContext()
        try updater.performAndWait { update in
            let pet = try #require(try update.fetch(Pet.self))
            try Self.breakReads(of: "Person", in: store)
            #expect(pet.owner == nil)  // the read failed
            pet.name = "Orphan?"
            #expect(throws: SQLiteError.self) { try update.commit() }
            // After a rollback the context commits again.
            update.rollback()
            pet.name = "Rex II"
            try update.commit()
        }
        #expect(errors.all.count == 1)
        #expect(try store.scalar("SELECT name FROM main.\"Pet\"") == .text("Rex II"))
    }

    /// Docs/Errors.md, "Failed reads inside property accessors", the other accessors: a to-many
    /// getter whose read fails returns an empty set, and values loaded late (a fault of a
    /// `.batch` fetch) read as the defaults; each error goes to `onError`, and the update's
    /// `commit()` throws it every time until the update is rolled back — here by its block
    /// throwing — after which the same update context commits again.
    @Test func aFailedToManyOrFaultReadStopsEveryCommitUntilTheBlockThrows() throws {
        struct GiveUp: Error {}
        for accessor in ["to-many", "fault"] {
            let store = try TestStore(.memory)
            let errors = ErrorRecorder()
            store.stack.onError = errors.record
            let context = try Context(stack: store.stack, updateTarget: .persistentStore)
            try context.beginUpdateAndWait { update in
                let ann = try update.create(Person.self)
                (ann.name, ann.age) = ("Ann", 30)
                let rex = try update.create(Pet.self)
                (rex.name, rex.owner) = ("Rex", ann)
                try update.commit()
            }
            // The change goes to the table whose reads still work, so that only the failed read
            // can stop the commits: the to-many's owner, or the pet beside the faulted person.
            let updater = context.beginUpdateContext()
            do {
                try updater.performAndWait { update in
                    if accessor == "to-many" {
                        let ann = try #require(try update.fetch(Person.self))
                        try Self.breakReads(of: "Pet", in: store)
                        #expect(ann.pets.isEmpty, "the read failed")
                        ann.age = 31
                    } else {
                        let rex = try #require(try update.fetch(Pet.self))
                        let ann = try #require(try update.fetchAll(Person.self, options: .batch(1)).first)
                        try Self.breakReads(of: "Person", in: store)
                        #expect(ann.name == "", "the values could not be loaded: \(ann.name)")
                        #expect(ann.age == 0, "each access reads again, and fails again")
                        rex.name = "Orphan?"
                    }
                    let thrown = #expect(throws: SQLiteError.self) { try update.commit() }
                    #expect(thrown.map { "\($0)" } == errors.all.first.map { "\($0)" }, "the accessor's error")
                    #expect(throws: SQLiteError.self, "and again") { try update.commit() }
                    throw GiveUp()
                }
                Issue.record("\(accessor): the block's error was not rethrown")
            } catch is GiveUp {}
            #expect(errors.all.count == (accessor == "fault" ? 2 : 1), "\(accessor): \(errors.all)")
            // Rolled back by the throw, the same update context commits again, reads still broken.
            try updater.performAndWait { update in
                if accessor == "to-many" {
                    try #require(try update.fetch(Person.self)).age = 32
                } else {
                    try #require(try update.fetch(Pet.self)).name = "Rex II"
                }
                try update.commit()
            }
            try store.stack.sqliteStore.writer.withLock { try $0.connection.execute("DROP VIEW temp.\"\(accessor == "to-many" ? "Pet" : "Person")\"") }
            #expect(try store.scalar("SELECT name FROM main.\"Pet\"") == .text(accessor == "fault" ? "Rex II" : "Rex"), "\(accessor)")
            #expect(try store.scalar("SELECT age FROM main.\"Person\"") == .integer(accessor == "fault" ? 30 : 32), "\(accessor)")
        }
    }

    /// A `delete` whose rules cannot read what they need (here the shipment a to-one
    /// `.cascade` takes) throws, and leaves the object marked deleted with its rules applied in
    /// part: the update's commits throw that error until it is rolled back, so the half-applied
    /// delete is never saved (Docs/Concurrency.md, "Errors"). Saved, it would delete the
    /// parcel and keep its shipment: the writer follows no to-one cascade whose inverse is a
    /// to-many (the shipment's other parcels do not say it must go).
    @Test func aDeleteWhoseRulesCannotReadStopsTheNextCommit() throws {
        let store = try TestStore(.memory, types: [Parcel.self, Shipment.self])
        let context = try Context(stack: store.stack, updateTarget: .persistentStore)
        try context.beginUpdateAndWait { update in
            let parcel = try update.create(Parcel.self)
            parcel.label = "Parcel"
            parcel.shipment = try update.create(Shipment.self)
            try update.commit()
        }
        let updater = context.beginUpdateContext()
        try updater.performAndWait { update in
            let parcel = try #require(try update.fetch(Parcel.self))
            try Self.breakReads(of: "Shipment", in: store)
            #expect(throws: SQLiteError.self) { try update.delete(parcel) }
            try update.delete(parcel)    // marked deleted already: nothing more to do
            #expect(throws: SQLiteError.self) { try update.commit() }
            update.rollback()
        }
        #expect(try store.scalar("SELECT count(*) FROM main.\"Parcel\"") == .integer(1))
        // With reads back, the same update deletes the parcel and its shipment.
        try store.stack.sqliteStore.writer.withLock { try $0.connection.execute("DROP VIEW temp.\"Shipment\"") }
        try updater.performAndWait { update in
            try update.delete(try #require(try update.fetch(Parcel.self)))
            try update.commit()
        }
        #expect(try store.scalar("SELECT count(*) FROM main.\"Parcel\"") == .integer(0))
        #expect(try store.scalar("SELECT count(*) FROM main.\"Shipment\"") == .integer(0))
    }

    /// Unlinking one side of a one-to-one must clear the partner too; when the partner cannot
    /// be read, the commit is refused rather than saving one side.
    @Test func aPartnerThatCannotBeReadStopsTheCommit() throws {
        let store = try TestStore(.memory)
        store.stack.onError = { _ in }
        let context = try Context(stack: store.stack, updateTarget: .persistentStore)
        try context.beginUpdateAndWait { update in
            let citizen = try update.create(Citizen.self)
            citizen.name = "Ada"
            let passport = try update.create(Passport.self)
            passport.number = "P-1"
            citizen.passport = passport
            try update.commit()
        }
        let holder = try store.scalar("SELECT holder FROM main.\"Passport\"")
        #expect(holder != .null)
        let updater = context.beginUpdateContext()
        try updater.performAndWait { update in
            let passport = try #require(try update.fetch(Passport.self))
            try Self.breakReads(of: "Citizen", in: store)
            passport.holder = nil
            #expect(throws: SQLiteError.self) { try update.commit() }
        }
        #expect(try store.scalar("SELECT holder FROM main.\"Passport\"") == holder)
    }
}

/// A to-one `.cascade` whose inverse is a to-many: deleting a parcel deletes its shipment.
@Entity final class Parcel: ManagedObject {
    var label: String = ""
    @Relationship(deleteRule: .cascade, inverse: \Shipment.parcels) var shipment: Shipment?
}

@Entity final class Shipment: ManagedObject {
    var number: Int = 0
    @Relationship var parcels: Set<Parcel>
}
