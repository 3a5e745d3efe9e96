@testable import ContextStack
import ContextStackPostgres
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
import Foundation
import Testing

/// `fetchOrCreate` when another process saves the same unique values first: two stacks on one
/// store stand for two processes (they share nothing but the database). No duplicate, no error:
/// the object the second `fetchOrCreate` made is merged into the saved row, this commit winning
/// on the values it gave, as the second of two `fetchOrCreate`s in one process merges
/// (Docs/Writing.md, Docs/Postgres.md).
@Suite struct FetchOrCreateAcrossProcessesTests {
    /// The other process saves between this `fetchOrCreate` and this commit.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func theSecondCommitMergesIntoTheSavedRow(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let other = try store.reopen()
        let otherUpdater = try Context(stack: other, updateTarget: .persistentStore)
        let world = try MainContext(stack: store.stack)
        let pets = try world.beginUpdateAndWait { update -> Int in
            let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
            monk.name = "Monk"
            let rex = try update.create(Pet.self)
            rex.name = "Rex"
            rex.owner = monk
            // Meanwhile, in the other process:
            try otherUpdater.beginUpdateAndWait { update in
                let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
                monk.age = 63
                monk.location = "Kyoto"
                try update.commit()
            }
            try update.commit()
            return 1
        }
        try await store.stack.flush()
        #expect(pets == 1)
        let people = try world.fetchAll(Person.self, %"email" == "monk@example.org")
        #expect(people.count == 1)
        #expect(people.first.map { [$0.name, String($0.age), $0.location ?? "-"] } == ["Monk", "63", "Kyoto"])
        #expect(people.first?.pets.map(\.name) == ["Rex"], "the pet points at the saved row")
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Person\"") == .integer(1))
        let otherWorld = try MainContext(stack: other)
        #expect(try otherWorld.fetch(Person.self, %"email" == "monk@example.org")?.name == "Monk")
    }

    /// The other process saves while this commit is on its way: it has inserted the values and
    /// not committed when `commit()` checks. The writer waits for it (for the file's write lock
    /// on SQLite; on PostgreSQL its insert meets the other's on the unique index, and it tries
    /// again from a savepoint), merges, and tells the main context that the object it was shown
    /// is gone and the saved one changed.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func theWriterMergesWhatAnotherProcessSavesWhileItWrites(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let commits = Locked<[Commit]>([])
        let observation = store.stack.observeCommit { commit in commits.withLock { $0.append(commit) } }
        defer { observation.cancel() }
        // A first object reserves a block of keys: the next ones need no write lock (which the
        // other process is about to hold on SQLite).
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Knight"
            try update.commit()
        }
        try await store.stack.flush()

        let insert = "INSERT INTO \"Person\" (\"Z_PK\", name, age, email) VALUES (1000000, 'Saved', 40, 'monk@example.org')"
        var otherPostgres: PostgresConnection?
        var otherSQLite: Connection?
        if let url = store.database?.url {
            let other = try PostgresConnection(PostgresSettings(url: url))
            try other.execute("BEGIN")
            try other.execute(insert)
            otherPostgres = other
        } else {
            let other = try store.rawConnection()
            try other.execute("BEGIN IMMEDIATE")
            try other.execute(insert)
            otherSQLite = other
        }
        let made = try world.beginUpdateAndWait { update -> ObjectID in
            let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
            monk.age = 63
            try update.commit()
            return monk.objectID
        }
        if let other = otherPostgres.take(), let url = store.database?.url {
            // Off the main actor: the other transaction must not wait for this test's turn on
            // it, which other tests can keep for a minute (and every PostgreSQL test's history
            // waits for the oldest open transaction of the server).
            #expect(try await commitOnceAWriterWaits(other, url: url), "the writer never waited for the other transaction")
        }
        try otherSQLite?.execute("COMMIT")
        try await store.stack.flush()
        await mainQueueTurn()

        #expect(try store.writtenRows("SELECT \"Z_PK\", name, age FROM \"Person\" WHERE email IS NOT NULL") == [[.integer(1_000_000), .text("Saved"), .integer(63)]])
        #expect(try world.fetchAll(Person.self, %"email" != nil).map(\.objectID.primaryKey) == [1_000_000])
        let seen = commits.withLock { $0 }
        #expect(seen.contains { $0.deleted.contains(made) }, "the object the main context was shown is gone")
        #expect(seen.contains { $0.updated.contains { $0.primaryKey == 1_000_000 } })
    }

    /// Two stacks on one store, for the commits a context makes while it still holds an object
    /// the writer merged into the other stack's row: this process's `context` (its updates go
    /// to a root context, written in the background), its errors, and the other process.
    private struct MergeFixture {
        let store: TestStore
        let queued: any QueuedStore
        let recorder = ErrorRecorder()
        let otherUpdater: Context
        let context: Context

        /// With a Rex among the stored objects, and keys reserved beforehand (reserving a block
        /// takes the writer on SQLite, which the tests hold).
        init(_ kind: StoreKind, policy: MergePolicy = .objectTrump, refusingAtCommit: Bool = false) throws {
            store = try TestStore(kind)
            queued = try #require(store.stack.store as? any QueuedStore)
            let recorder = recorder
            store.stack.onError = { recorder.record($0) }
            // On PostgreSQL at `COMMIT`, after the writer merged and heard every statement answered.
            if refusingAtCommit { try store.refuseWrites(ofName: "refused", atCommit: true) }
            otherUpdater = try Context(stack: try store.reopen(), updateTarget: .persistentStore)
            context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false), mergePolicy: policy)
            try context.beginUpdateAndWait { update in
                try update.create(Person.self).name = "first"
                try update.create(Pet.self).name = "Rex"
                try update.commit()
            }
            try store.stack.flushAndWait()
        }

        /// This process's `fetchOrCreate` of the monk, named Monk (and whatever `more` does in
        /// the same update), committed; the ID of the object it made.
        func commitMonk(_ more: (Update) throws -> Void = { _ in }) throws -> ObjectID {
            try context.beginUpdateAndWait { update -> ObjectID in
                let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
                monk.name = "Monk"
                try more(update)
                try update.commit()
                return monk.objectID
            }
        }

        /// The other process saves the monk first, aged 63.
        func otherProcessSavesMonk() throws {
            try otherUpdater.beginUpdateAndWait { update in
                try update.fetchOrCreate(Person.self, %"email" == "monk@example.org").age = 63
                try update.commit()
            }
        }

        /// Until the writer took every queued commit off the queue (and waits for the held writer).
        func waitUntilTaken() throws {
            for _ in 0..<60_000 where !queued.state.withLock({ $0.queue.isEmpty }) { usleep(1_000) }
            try #require(queued.state.withLock { $0.queue.isEmpty })
        }

        /// Runs `body` in the update that made the monk by `fetchOrCreate` and committed it,
        /// once the writer merged it into the other process's row: the update still holds it.
        func afterTheMerge(_ body: (Update, Person) throws -> Void) throws {
            // The drain that wrote the fixture may still be running: a commit handed over
            // meanwhile would be taken by it, suspended queue or not.
            queued.writeQueue.sync {}
            queued.writeQueue.suspend()
            var suspended = true
            defer { if suspended { queued.writeQueue.resume() } }
            try context.beginUpdateAndWait { update in
                let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
                monk.name = "Monk"
                try update.commit()
                try otherProcessSavesMonk()
                queued.writeQueue.resume()
                suspended = false
                try store.stack.flushAndWait()  // merged into the other process's row
                try body(update, monk)
            }
        }

        /// A commit of `body`, in an update of `context`.
        func commit(_ body: (Update) throws -> Void) throws {
            try context.beginUpdateAndWait { update in
                try body(update)
                try update.commit()
            }
        }

        /// The stored monk: key, name, age, location.
        func storedMonk() throws -> [Value] {
            let people = try store.writtenRows("SELECT \"Z_PK\", name, age, location FROM \"Person\" WHERE email IS NOT NULL")
            try #require(people.count == 1, "\(people)")
            return people[0]
        }
    }

    /// The writer merges an object into the row another process saved while commits that name
    /// the object wait behind it: made while the context still held the object, before the
    /// correction replacing it reached the context. They name the saved row when written — the
    /// owner of a stored pet and of a new one, a change to the object — in the merge's own
    /// transaction (`sameGroup`) or in a later one. Written as made, the pets would point at a
    /// row that never was, and the change would update none.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }, [true, false]) @MainActor
    func commitsNamingAMergedObjectNameTheSavedRow(kind: StoreKind, sameGroup: Bool) async throws {
        let fixture = try MergeFixture(kind)
        let world = try MainContext(stack: fixture.store.stack)
        let commits = Locked<[Commit]>([])
        let observation = fixture.store.stack.observeCommit { commit in commits.withLock { $0.append(commit) } }
        defer { observation.cancel() }
        let batchesBefore = fixture.queued.state.withLock { $0.transactionCount }
        func commitRex(ownedBy made: ObjectID) throws {
            try fixture.commit { update in
                let monk = try #require(try update.fetch(Person.self, id: made))
                monk.location = "Kyoto"
                try #require(try update.fetch(Pet.self, %"name" == "Rex")).owner = monk
                let tom = try update.create(Pet.self)
                tom.name = "Tom"
                tom.owner = monk
            }
        }
        let made: ObjectID
        if sameGroup {
            // The drain that wrote the fixture may still be running: a commit handed over
            // meanwhile would be taken by it, suspended queue or not.
            fixture.queued.writeQueue.sync {}
            fixture.queued.writeQueue.suspend()
            defer { fixture.queued.writeQueue.resume() }
            made = try fixture.commitMonk()
            try fixture.otherProcessSavesMonk()
            try commitRex(ownedBy: made)
        } else {
            made = try fixture.store.holdingTheWriter {
                let made = try fixture.commitMonk()
                try fixture.waitUntilTaken()
                try fixture.otherProcessSavesMonk()
                try commitRex(ownedBy: made)
                return made
            }
        }
        try fixture.store.stack.flushAndWait()
        #expect(fixture.recorder.all.isEmpty, "\(fixture.recorder.all)")
        #expect(fixture.queued.state.withLock { $0.transactionCount } - batchesBefore == (sameGroup ? 1 : 2))

        let monk = try fixture.storedMonk()
        #expect(monk[0] != .integer(made.primaryKey), "the other process's row")
        #expect(Array(monk.dropFirst()) == [.text("Monk"), .integer(63), .text("Kyoto")])
        #expect(try fixture.store.writtenRows("SELECT name, owner FROM \"Pet\" ORDER BY name") == [[.text("Rex"), monk[0]], [.text("Tom"), monk[0]]])
        let location = try fixture.otherUpdater.beginUpdateAndWait { update in
            try update.fetch(Pet.self, %"name" == "Rex")?.owner?.location
        }
        #expect(location == "Kyoto", "the other process finds the pet's owner")
        // Those shown the commits as made were told what they became (the pet's owner
        // changed); the main context, shown them once written, was shown them as written.
        await mainQueueTurn()
        let rex = try #require(try world.fetch(Pet.self, %"name" == "Rex"))
        #expect(commits.withLock { $0 }.contains { $0.updated.contains(rex.objectID) }, "the pet's new owner was announced")
        #expect(rex.owner?.objectID.primaryKey == monk[0].int64Value)
        #expect(try world.fetch(Person.self, id: made) == nil)
    }

    /// A delete of the merged object, made while the context still held it, fails: its delete
    /// rules ran over the object the context knew, not over the saved row's relationships (the
    /// other process's pets would be left pointing at a row that is gone). The row stays.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func aDeleteOfAMergedObjectFailsAndTheSavedRowStays(kind: StoreKind) throws {
        let fixture = try MergeFixture(kind)
        let made = try fixture.store.holdingTheWriter {
            let made = try fixture.commitMonk()
            try fixture.waitUntilTaken()
            try fixture.otherProcessSavesMonk()
            try fixture.commit { update in try update.delete(try #require(try update.fetch(Person.self, id: made))) }
            return made
        }
        #expect(throws: (any Error).self) { try fixture.store.stack.flushAndWait() }
        let errors = fixture.recorder.all
        let refusals = errors.compactMap { $0 as? SaveError }.filter { $0.code == .deletesMergedObject }
        #expect(errors.count == 1 && refusals.count == 1 && refusals.first?.objects.first == made, "\(errors)")
        #expect(try fixture.store.writtenRows("SELECT name, age FROM \"Person\" ORDER BY name") == [[.text("Monk"), .integer(63)], [.text("first"), .integer(0)]])
    }

    /// A commit whose merge is then not stored (its transaction fails whole) leaves no merge
    /// behind: a change to the object made meanwhile fails with the failed insert
    /// (`.dependsOnFailedCommit`), and does not reach the row the other process saved.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func aMergeThatIsNotStoredIsForgotten(kind: StoreKind) throws {
        let fixture = try MergeFixture(kind, refusingAtCommit: true)
        try fixture.store.holdingTheWriter {
            // Merged when written, in a commit whose other insert the database refuses.
            let made = try fixture.commitMonk { update in try update.create(Person.self).name = "refused" }
            try fixture.waitUntilTaken()
            try fixture.otherProcessSavesMonk()
            try fixture.commit { update in try #require(try update.fetch(Person.self, id: made)).location = "Kyoto" }
        }
        #expect(throws: (any Error).self) { try fixture.store.stack.flushAndWait() }
        let errors = fixture.recorder.all
        #expect(errors.count == 2, "\(errors)")
        #expect(errors.contains(where: TestStore.isRefusal), "\(errors)")
        #expect(errors.contains { ($0 as? SaveError)?.code == .dependsOnFailedCommit }, "\(errors)")
        #expect(try Array(fixture.storedMonk().dropFirst()) == [.text(""), .integer(63), .null])
    }

    /// The same delete, made after the merge was written, by the update that made the object:
    /// under a merge policy that compares with the store, `commit()` checks the commit against
    /// what the store knows and throws at once.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func aDeleteOfAMergedObjectThrowsFromCommitWhenChecked(kind: StoreKind) throws {
        let fixture = try MergeFixture(kind, policy: .storeTrump)
        try fixture.afterTheMerge { update, monk in
            try update.delete(monk)
            try #require(try update.fetch(Pet.self, %"name" == "Rex")).age = 5  // an update: checked
            #expect { try update.commit() } throws: { ($0 as? SaveError)?.code == .deletesMergedObject }
            update.rollback()
        }
        try fixture.store.stack.flushAndWait()
        #expect(fixture.recorder.all.isEmpty, "\(fixture.recorder.all)")
        #expect(try Array(fixture.storedMonk().dropFirst()) == [.text("Monk"), .integer(63), .null])
    }

    static let policyCases: [(StoreKind, MergePolicy)] = StoreKind.available.filter { $0 != .memory }.flatMap { kind in
        [MergePolicy.objectTrump, .storeTrump, .overwrite, .rollback, .error].map { (kind, $0) }
    }

    /// An update that goes on after its commit's object was merged into another process's row
    /// (written meanwhile) names the object still, in what it changes and in the values it
    /// started from. Its commits are saved naming the row, under every merge policy: neither the
    /// row the object never had nor the pet's owner as the update last saw it (the object, where
    /// the store holds the row) is a change made underneath it.
    @Test(arguments: policyCases)
    func anUpdateThatGoesOnAfterTheMergeIsSavedUnderEveryPolicy(kind: StoreKind, policy: MergePolicy) throws {
        let fixture = try MergeFixture(kind, policy: policy)
        try fixture.afterTheMerge { update, monk in
            monk.location = "Kyoto"
            let rex = try #require(try update.fetch(Pet.self, %"name" == "Rex"))
            rex.owner = monk
            try update.commit()
            // Rex's owner, as this update last saw it, is the object.
            rex.age = 3
            try update.commit()
        }
        try fixture.store.stack.flushAndWait()
        #expect(fixture.recorder.all.isEmpty, "\(fixture.recorder.all)")
        let monk = try fixture.storedMonk()
        #expect(Array(monk.dropFirst()) == [.text("Monk"), .integer(63), .text("Kyoto")])
        #expect(try fixture.store.writtenRows("SELECT owner, age FROM \"Pet\" WHERE name = 'Rex'") == [[monk[0], .integer(3)]])
    }

    /// A join pair that names the merged object, made while the context still held it, joins
    /// the saved row: the other process finds its own badge among the holder's.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func aJoinPairNamingAMergedObjectJoinsTheSavedRow(kind: StoreKind) throws {
        let types: [ManagedObject.Type] = [Badge.self, Holder.self]
        let store = try TestStore(kind, types: types)
        let queued = try #require(store.stack.store as? any QueuedStore)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let otherUpdater = try Context(stack: try store.reopen(types: types), updateTarget: .persistentStore)
        let context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        // Blocks of keys reserved beforehand (reserving one takes the writer on SQLite).
        try context.beginUpdateAndWait { update in
            try update.create(Holder.self).name = "Ann"
            try update.create(Badge.self).code = "first"
            try update.commit()
        }
        try store.stack.flushAndWait()
        try store.holdingTheWriter {
            let made = try context.beginUpdateAndWait { update -> ObjectID in
                let gold = try update.fetchOrCreate(Badge.self, %"code" == "gold")
                try update.commit()
                return gold.objectID
            }
            for _ in 0..<60_000 where !queued.state.withLock({ $0.queue.isEmpty }) { usleep(1_000) }
            try #require(queued.state.withLock { $0.queue.isEmpty })
            try otherUpdater.beginUpdateAndWait { update in
                _ = try update.fetchOrCreate(Badge.self, %"code" == "gold")
                try update.commit()
            }
            try context.beginUpdateAndWait { update in
                let ann = try #require(try update.fetch(Holder.self, %"name" == "Ann"))
                ann.badges.insert(try #require(try update.fetch(Badge.self, id: made)))
                try update.commit()
            }
        }
        try store.stack.flushAndWait()
        #expect(recorder.all.isEmpty, "\(recorder.all)")
        let seen = try otherUpdater.beginUpdateAndWait { update in
            (try update.fetchAll(Badge.self, %"code" == "gold").map(\.objectID),
             try update.fetch(Holder.self, %"name" == "Ann")?.badges.map(\.objectID))
        }
        #expect(seen.0.count == 1, "one gold badge: the other process's")
        #expect(seen.1 == seen.0, "Ann holds it")
    }
}

/// A unique entity with a many-to-many relationship, for the join pairs of a merged object.
@Entity final class Badge: ManagedObject {
    @Attribute(.unique) var code: String?
    @Relationship(inverse: \Holder.badges) var holders: Set<Holder>
}

@Entity final class Holder: ManagedObject {
    var name: String = ""
    @Relationship var badges: Set<Badge>
}

