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

    /// The writer merges an object into the row another process saved while commits that name
    /// the object wait behind it: made while the context still held the object, before the
    /// correction replacing it reached the context. They name the saved row when written — a
    /// pet's owner, a change to the object — in the merge's own transaction (`sameGroup`) or
    /// in a later one. Written as made, the pet would point at a row that never was, and the
    /// change would update none.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }, [true, false]) @MainActor
    func commitsNamingAMergedObjectNameTheSavedRow(kind: StoreKind, sameGroup: Bool) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let commits = Locked<[Commit]>([])
        let observation = store.stack.observeCommit { commit in commits.withLock { $0.append(commit) } }
        defer { observation.cancel() }
        let queued = try #require(store.stack.store as? any QueuedStore)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let other = try store.reopen()
        let otherUpdater = try Context(stack: other, updateTarget: .persistentStore)
        let context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        // Blocks of keys reserved beforehand: reserving one takes the writer on SQLite.
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "first"
            try update.create(Pet.self).name = "first"
            try update.commit()
        }
        try store.stack.flushAndWait()
        let batchesBefore = queued.state.withLock { $0.transactionCount }

        func commitMonk() throws -> ObjectID {
            try context.beginUpdateAndWait { update -> ObjectID in
                let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
                monk.name = "Monk"
                try update.commit()
                return monk.objectID
            }
        }
        func otherProcessSavesMonk() throws {
            try otherUpdater.beginUpdateAndWait { update in
                let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
                monk.age = 63
                try update.commit()
            }
        }
        func commitRex(ownedBy made: ObjectID) throws {
            try context.beginUpdateAndWait { update in
                let monk = try #require(try update.fetch(Person.self, id: made))
                monk.location = "Kyoto"
                let rex = try update.create(Pet.self)
                rex.name = "Rex"
                rex.owner = monk
                try update.commit()
            }
        }
        let made: ObjectID
        if sameGroup {
            // The drain that wrote the fixture may still be running: a commit handed over
            // meanwhile would be taken by it, suspended queue or not.
            queued.writeQueue.sync {}
            queued.writeQueue.suspend()
            defer { queued.writeQueue.resume() }
            made = try commitMonk()
            try otherProcessSavesMonk()
            try commitRex(ownedBy: made)
        } else {
            made = try store.holdingTheWriter {
                let made = try commitMonk()
                // Until the writer took the first commit off the queue (and waits for the held writer).
                for _ in 0..<60_000 where !queued.state.withLock({ $0.queue.isEmpty }) { usleep(1_000) }
                try #require(queued.state.withLock { $0.queue.isEmpty })
                try otherProcessSavesMonk()
                try commitRex(ownedBy: made)
                return made
            }
        }
        try store.stack.flushAndWait()
        #expect(recorder.all.isEmpty, "\(recorder.all)")
        #expect(queued.state.withLock { $0.transactionCount } - batchesBefore == (sameGroup ? 1 : 2))

        let people = try store.writtenRows("SELECT \"Z_PK\", name, age, location FROM \"Person\" WHERE email IS NOT NULL")
        try #require(people.count == 1, "\(people)")
        let saved = try #require(people[0][0].int64Value)
        #expect(saved != made.primaryKey, "the other process's row")
        #expect(Array(people[0].dropFirst()) == [.text("Monk"), .integer(63), .text("Kyoto")])
        #expect(try store.writtenRows("SELECT owner FROM \"Pet\" WHERE name = 'Rex'") == [[.integer(saved)]])
        let location = try otherUpdater.beginUpdateAndWait { update in
            try update.fetch(Pet.self, %"name" == "Rex")?.owner?.location
        }
        #expect(location == "Kyoto", "the other process finds the pet's owner")
        // Those shown the commits as made were told what they became (the pet's owner
        // changed); the main context, shown them once written, was shown them as written.
        await mainQueueTurn()
        let rex = try #require(try world.fetch(Pet.self, %"name" == "Rex")).objectID
        #expect(commits.withLock { $0 }.contains { $0.updated.contains(rex) }, "the pet's new owner was announced")
        #expect(try world.fetch(Pet.self, %"name" == "Rex")?.owner?.objectID.primaryKey == saved)
        #expect(try world.fetch(Person.self, id: made) == nil)
    }

    /// A delete of the merged object, made while the context still held it, fails: its delete
    /// rules ran over the object the context knew, not over the saved row's relationships (the
    /// other process's pets would be left pointing at a row that is gone). The row stays.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func aDeleteOfAMergedObjectFailsAndTheSavedRowStays(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let queued = try #require(store.stack.store as? any QueuedStore)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let other = try store.reopen()
        let otherUpdater = try Context(stack: other, updateTarget: .persistentStore)
        let context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "first"
            try update.commit()
        }
        try store.stack.flushAndWait()
        let made = try store.holdingTheWriter {
            let made = try context.beginUpdateAndWait { update -> ObjectID in
                let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
                monk.name = "Monk"
                try update.commit()
                return monk.objectID
            }
            for _ in 0..<60_000 where !queued.state.withLock({ $0.queue.isEmpty }) { usleep(1_000) }
            try #require(queued.state.withLock { $0.queue.isEmpty })
            try otherUpdater.beginUpdateAndWait { update in
                try update.fetchOrCreate(Person.self, %"email" == "monk@example.org").age = 63
                try update.commit()
            }
            try context.beginUpdateAndWait { update in
                try update.delete(try #require(try update.fetch(Person.self, id: made)))
                try update.commit()
            }
            return made
        }
        #expect(throws: (any Error).self) { try store.stack.flushAndWait() }
        let refusals = recorder.all.compactMap { $0 as? SaveError }.filter { $0.code == .deletesMergedObject }
        #expect(recorder.all.count == 1 && refusals.count == 1 && refusals.first?.objects.first == made, "\(recorder.all)")
        #expect(try store.writtenRows("SELECT name, age FROM \"Person\" ORDER BY name") == [[.text("Monk"), .integer(63)], [.text("first"), .integer(0)]])
    }

    /// A commit whose merge is then not stored (its transaction fails whole) leaves no merge
    /// behind: a change to the object made meanwhile fails with the failed insert
    /// (`.dependsOnFailedCommit`), and does not reach the row the other process saved.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func aMergeThatIsNotStoredIsForgotten(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let queued = try #require(store.stack.store as? any QueuedStore)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        // On PostgreSQL at `COMMIT`, after the writer merged and heard every statement answered.
        try store.refuseWrites(ofName: "refused", atCommit: true)
        let other = try store.reopen()
        let otherUpdater = try Context(stack: other, updateTarget: .persistentStore)
        let context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "first"
            try update.commit()
        }
        try store.stack.flushAndWait()
        try store.holdingTheWriter {
            // Merged when written, in a commit whose other insert the database refuses.
            let made = try context.beginUpdateAndWait { update -> ObjectID in
                let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
                monk.name = "Monk"
                try update.create(Person.self).name = "refused"
                try update.commit()
                return monk.objectID
            }
            for _ in 0..<60_000 where !queued.state.withLock({ $0.queue.isEmpty }) { usleep(1_000) }
            try #require(queued.state.withLock { $0.queue.isEmpty })
            try otherUpdater.beginUpdateAndWait { update in
                try update.fetchOrCreate(Person.self, %"email" == "monk@example.org").age = 63
                try update.commit()
            }
            try context.beginUpdateAndWait { update in
                try #require(try update.fetch(Person.self, id: made)).location = "Kyoto"
                try update.commit()
            }
        }
        #expect(throws: (any Error).self) { try store.stack.flushAndWait() }
        #expect(recorder.all.count == 2, "\(recorder.all)")
        #expect(recorder.all.contains(where: TestStore.isRefusal), "\(recorder.all)")
        #expect(recorder.all.contains { ($0 as? SaveError)?.code == .dependsOnFailedCommit }, "\(recorder.all)")
        #expect(try store.writtenRows("SELECT name, age, location FROM \"Person\" WHERE email IS NOT NULL") == [[.text(""), .integer(63), .null]])
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
        let store = try TestStore(kind)
        let queued = try #require(store.stack.store as? any QueuedStore)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let other = try store.reopen()
        let otherUpdater = try Context(stack: other, updateTarget: .persistentStore)
        let context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false), mergePolicy: policy)
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "first"
            try update.create(Pet.self).name = "Rex"
            try update.commit()
        }
        try store.stack.flushAndWait()
        queued.writeQueue.sync {}
        queued.writeQueue.suspend()
        var suspended = true
        defer { if suspended { queued.writeQueue.resume() } }
        try context.beginUpdateAndWait { update in
            let monk = try update.fetchOrCreate(Person.self, %"email" == "monk@example.org")
            monk.name = "Monk"
            try update.commit()
            try otherUpdater.beginUpdateAndWait { update in
                try update.fetchOrCreate(Person.self, %"email" == "monk@example.org").age = 63
                try update.commit()
            }
            queued.writeQueue.resume()
            suspended = false
            try store.stack.flushAndWait()  // merged into the other process's row
            // This update still holds the object it made.
            monk.location = "Kyoto"
            let rex = try #require(try update.fetch(Pet.self, %"name" == "Rex"))
            rex.owner = monk
            try update.commit()
            // Rex's owner, as this update last saw it, is the object.
            rex.age = 3
            try update.commit()
        }
        try store.stack.flushAndWait()
        #expect(recorder.all.isEmpty, "\(recorder.all)")
        let people = try store.writtenRows("SELECT \"Z_PK\", name, age, location FROM \"Person\" WHERE email IS NOT NULL")
        try #require(people.count == 1, "\(people)")
        #expect(Array(people[0].dropFirst()) == [.text("Monk"), .integer(63), .text("Kyoto")])
        #expect(try store.writtenRows("SELECT owner, age FROM \"Pet\" WHERE name = 'Rex'") == [[people[0][0], .integer(3)]])
    }
}

