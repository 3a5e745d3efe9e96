@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackPostgres
import ContextStackPostgres
import Foundation
import Testing

/// A commit and a delete of the object it relates to, made at the same time by two contexts
/// that each read before the other committed: in one process, or in two (two stacks on one
/// store share nothing but the database). No reference may be left pointing at a row that is
/// gone (Docs/Writing.md, "Deletes made meanwhile").
@Suite struct ConcurrentDeleteTests {
    /// Two contexts that read before either commits: `mine`, whose commits wait until written
    /// (so the writer's error reaches `commit()`), and `theirs` — on a stack of its own (another
    /// process) on stores that have a file or a server, on the same stack in memory.
    private struct Fixture {
        let store: TestStore
        let mine: Context
        let theirs: Context

        init(_ kind: StoreKind, types: [ManagedObject.Type] = fullModelTypes, tracksHistory: Bool? = nil,
             mergePolicy: MergePolicy = .objectTrump) throws {
            store = try TestStore(kind, types: types, tracksHistory: tracksHistory)
            mine = try Context(stack: store.stack, updateTarget: .persistentStore, mergePolicy: mergePolicy)
            let other = kind == .memory ? store.stack : try store.reopen(types: types)
            theirs = try Context(stack: other, updateTarget: .persistentStore)
        }

        /// Runs `body` in an update of `mine` and commits it.
        func commitMine<T>(_ body: (Update) throws -> T) throws -> T {
            try mine.beginUpdateAndWait { update in
                let result = try body(update)
                try update.commit()
                return result
            }
        }

        /// The `SaveError` committing `body` in an update of `mine` throws; `nil` when it is saved.
        func saveErrorOfMine(_ body: (Update) throws -> Void) throws -> SaveError? {
            do {
                try commitMine(body)
            } catch let error as SaveError {
                return error
            }
            return nil
        }

        /// The `MergeConflictError` committing `body` in an update of `mine` throws; `nil` when
        /// it is saved.
        func conflictOfMine(_ body: (Update) throws -> Void) throws -> MergeConflictError? {
            do {
                try commitMine(body)
            } catch let error as MergeConflictError {
                return error
            }
            return nil
        }

        /// Runs `body` in an update of `theirs` and commits it.
        func commitTheirs(_ body: (Update) throws -> Void) throws {
            try theirs.beginUpdateAndWait { update in
                try body(update)
                try update.commit()
            }
        }

        func stored(_ sql: String) throws -> [[Value]] { try store.writtenRows(sql) }
    }

    // MARK: - A reference to a row deleted meanwhile

    /// This commit points an object at a person another commit deleted after this context read
    /// the person: written, the reference would name a row that is gone. The commit fails
    /// whole, and says which objects.
    @Test(arguments: StoreKind.available, [false, true])
    func aReferenceToARowDeletedMeanwhileFailsTheCommit(kind: StoreKind, insertsTheReferrer: Bool) throws {
        let fixture = try Fixture(kind)
        try fixture.commitMine { update in
            try update.create(Person.self).name = "Monk"
            try update.create(Pet.self).name = "Rex"
        }
        let related = Locked<[ObjectID]>([])
        let thrown = try fixture.saveErrorOfMine { update in
            let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
            // Meanwhile, another context deletes the monk.
            try fixture.commitTheirs { update in
                try update.delete(#require(try update.fetch(Person.self, %"name" == "Monk")))
            }
            let pet = insertsTheReferrer ? try update.create(Pet.self) : try #require(try update.fetch(Pet.self, %"name" == "Rex"))
            if insertsTheReferrer { pet.name = "Fido" }
            pet.age = 3
            pet.owner = monk
            related.withLock { $0 = [pet.objectID, monk.objectID] }
        }
        let error = try #require(thrown, "the commit was saved")
        #expect(error.code == .relatesToDeletedObject)
        // The object related (the pet), then the deleted one (the monk): Docs/Writing.md.
        #expect(error.objects == related.withLock { $0 })
        #expect(try fixture.stored("SELECT name, age, owner FROM \"Pet\" ORDER BY name") == [[.text("Rex"), .integer(0), .null]],
                "nothing of the commit is saved")
        #expect(try fixture.stored("SELECT count(*) FROM \"Person\"") == [[.integer(0)]])
    }

    /// The same for a pair of a many-to-many relationship: the tag was deleted meanwhile.
    @Test(arguments: StoreKind.available)
    func aPairWithARowDeletedMeanwhileFailsTheCommit(kind: StoreKind) throws {
        let fixture = try Fixture(kind)
        try fixture.commitMine { update in
            try update.create(Tag.self).name = "swift"
            try update.create(Article.self).title = "Contexts"
        }
        let thrown = try fixture.saveErrorOfMine { update in
            let tag = try #require(try update.fetch(Tag.self, %"name" == "swift"))
            try fixture.commitTheirs { update in
                try update.delete(#require(try update.fetch(Tag.self, %"name" == "swift")))
            }
            let article = try #require(try update.fetch(Article.self, %"title" == "Contexts"))
            article.tags.insert(tag)
        }
        #expect(thrown?.code == .relatesToDeletedObject)
        #expect(try fixture.stored("SELECT count(*) FROM \"Z_Article_tags_Tag_articles\"") == [[.integer(0)]])
    }

    // MARK: - A delete whose rules did not see a referrer added meanwhile

    /// This context deletes the monk after reading his relationships, empty; another commit
    /// related a new object to him meanwhile. The rule the context ran over what it knew is
    /// applied by the writer to what is stored: `.cascade` deletes the new pet, `.nullify`
    /// clears the new friend's reference. Either way no row is left pointing at the monk, and
    /// the commit's receivers, and the history, hear of what the rule did.
    @Test(arguments: StoreKind.available, [DeleteRule.cascade, .nullify]) @MainActor
    func aDeleteAppliesItsRuleToReferrersAddedMeanwhile(kind: StoreKind, rule: DeleteRule) async throws {
        let fixture = try Fixture(kind, tracksHistory: kind != .memory)
        try fixture.commitMine { update in
            try update.create(Person.self).name = "Monk"
            try update.create(Person.self).name = "Knight"
        }
        let commits = Locked<[Commit]>([])
        let observation = fixture.store.stack.observeCommit { commit in commits.withLock { $0.append(commit) } }
        defer { observation.cancel() }
        let referrer = try fixture.commitMine { update -> ObjectID in
            let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
            // What the delete rules run over, read now: empty.
            #expect(monk.pets.isEmpty && monk.friendOf.isEmpty)
            var made: ObjectID?
            try fixture.commitTheirs { update in
                let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
                if rule == .cascade {
                    let fido = try update.create(Pet.self)
                    fido.name = "Fido"
                    fido.owner = monk
                    made = fido.objectID
                } else {
                    let knight = try #require(try update.fetch(Person.self, %"name" == "Knight"))
                    knight.friend = monk
                    made = knight.objectID
                }
            }
            try update.delete(monk)
            return try #require(made)
        }
        #expect(try fixture.stored("SELECT name FROM \"Person\" ORDER BY name") == [[.text("Knight")]])
        #expect(try fixture.stored("SELECT count(*) FROM \"Pet\"") == [[.integer(0)]], "the new pet went with its owner")
        #expect(try fixture.stored("SELECT count(*) FROM \"Person\" WHERE friend IS NOT NULL") == [[.integer(0)]],
                "the new friend let go")
        try await fixture.store.stack.flush()
        await mainQueueTurn()
        let seen = commits.withLock { $0 }
        if rule == .cascade {
            #expect(seen.contains { $0.deleted.contains(referrer) }, "the receivers hear that the pet is gone")
        } else {
            #expect(seen.contains { $0.updated.contains(referrer) }, "the receivers hear that the friend changed")
        }
        if kind != .memory {
            // On PostgreSQL a transaction is in the history once every older one has ended:
            // other tests' transactions on the same server may hold it back for a moment.
            try await fixture.store.settleHistory()
            let last = try #require(try fixture.store.stack.history(after: nil).last)
            let expected = HistoryChange(kind: rule == .cascade ? .delete : .update, objectID: referrer,
                                         entityName: rule == .cascade ? "Pet" : "Person", changedKeys: rule == .cascade ? [] : ["friend"])
            #expect(last.changes.contains(expected), "the history has what the rule did: \(last.changes)")
        }
    }

    /// `.deny`: the vault's coins were empty when this context read them, and another commit
    /// put a coin in meanwhile. The delete fails, and the vault stays.
    @Test(arguments: StoreKind.available)
    func aDenyRuleRefusesAReferrerAddedMeanwhile(kind: StoreKind) throws {
        let fixture = try Fixture(kind)
        try fixture.commitMine { update in try update.create(Vault.self).label = "gold" }
        let thrown = try fixture.saveErrorOfMine { update in
            let vault = try #require(try update.fetch(Vault.self, %"label" == "gold"))
            #expect(vault.coins.isEmpty)
            try fixture.commitTheirs { update in
                let coin = try update.create(Coin.self)
                coin.vault = try update.fetch(Vault.self, %"label" == "gold")
            }
            try update.delete(vault)
        }
        #expect(thrown?.code == .deleteDenied)
        #expect(thrown?.objects.map(\.entityName) == ["Vault", "Coin"])
        #expect(try fixture.stored("SELECT count(*) FROM \"Vault\"") == [[.integer(1)]])
        #expect(try fixture.stored("SELECT count(*) FROM \"Coin\" WHERE vault IS NOT NULL") == [[.integer(1)]])
    }

    // MARK: - Both at once, many times

    /// Two processes (two stacks) at once: one gives people pets, the other deletes the people
    /// — after reading their pets, or with `batchDelete`. Whichever commit the store writes
    /// first, no pet is left pointing at a person who is gone; the commits that lost fail with
    /// the documented error.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }, [false, true])
    func manyReferencesAndDeletesAtOnceLeaveNoneDangling(kind: StoreKind, batchDeletes: Bool) async throws {
        let store = try TestStore(kind)
        try await Self.raceReferencesAndDeletes(store, deleting: try store.reopen(), batchDeletes: batchDeletes)
    }

    /// The same race on PostgreSQL with both stacks' sessions defaulting to REPEATABLE READ (as a
    /// database's or a role's `default_transaction_isolation` would make them). The writer's
    /// transactions read committed rows all the same: a delete's look for what refers to its
    /// row, made after waiting for the transaction that gave that row a pet, must see the pet.
    @Test(.enabled(if: PostgresServer.isAvailable), arguments: [false, true])
    func manyReferencesAndDeletesAtOnceLeaveNoneDanglingUnderAServerDefaultOfRepeatableRead(batchDeletes: Bool) async throws {
        let schema = try TestSchema()
        let url = schema.url.addingServerOption("-cdefault_transaction_isolation=repeatable\\ read")
        #expect(try PostgresConnection(PostgresSettings(url: url)).scalar("SHOW default_transaction_isolation") == .text("repeatable read"))
        let store = try TestStore(model: Model(fullModelTypes), schema: schema) { stack, _ in try stack.addPostgresStore(url: url) }
        let deleting = try Stack(model: Model(fullModelTypes))
        try deleting.addPostgresStore(url: url)
        try await Self.raceReferencesAndDeletes(store, deleting: deleting, batchDeletes: batchDeletes)
    }

    /// One stack gives people pets while `deleting`, another on the same store, deletes them.
    private static func raceReferencesAndDeletes(_ store: TestStore, deleting: Stack, batchDeletes: Bool) async throws {
        let people = 300
        let setup = try Context(stack: store.stack, updateTarget: .persistentStore)
        try setup.beginUpdateAndWait { update in
            for index in 0..<people { try update.create(Person.self).age = index }
            try update.commit()
        }
        let giver = try Context(stack: store.stack, updateTarget: .persistentStore)
        let deleter = try Context(stack: deleting, updateTarget: .persistentStore)
        let unexpected = Locked<[String]>([])
        let refused = Locked(0)
        await onThreads(2) { thread in
            for index in 0..<people {
                do {
                    if thread == 0 {
                        try giver.beginUpdateAndWait { update in
                            guard let person = try update.fetch(Person.self, %"age" == index) else { return }
                            let pet = try update.create(Pet.self)
                            pet.age = index
                            pet.owner = person
                            try update.commit()
                        }
                    } else {
                        try deleter.beginUpdateAndWait { update in
                            if batchDeletes {
                                try update.batchDelete(Person.self, %"age" == index)
                                return
                            }
                            guard let person = try update.fetch(Person.self, %"age" == index) else { return }
                            _ = person.pets.count
                            try update.delete(person)
                            try update.commit()
                        }
                    }
                } catch let error as SaveError where error.code == .relatesToDeletedObject {
                    refused.withLock { $0 += 1 }
                } catch {
                    unexpected.withLock { $0.append("\(error)") }
                }
            }
        }
        #expect(unexpected.withLock { $0 }.isEmpty)
        #expect(try store.writtenRows("SELECT count(*) FROM \"Person\"") == [[.integer(0)]])
        #expect(try store.writtenRows("""
            SELECT count(*) FROM "Pet" WHERE owner IS NOT NULL AND owner NOT IN (SELECT "Z_PK" FROM "Person")
            """) == [[.integer(0)]], "no pet points at a person who is gone")
        #expect(try store.writtenRows("SELECT count(*) FROM \"Pet\"") == [[.integer(0)]], "every pet went with its owner (.cascade)")
    }
}

extension ConcurrentDeleteTests {
    /// The rules across a many-to-many relationship: a shelf's books are `.deny`, a crate's
    /// cans `.cascade`, a poster's walls `.nullify`, an album's songs `.noAction` (a pair is
    /// removed whatever the rule: Docs/Writing.md). Another commit put a new member in while
    /// this context deleted the owner, having read its members (empty).
    @Test(arguments: StoreKind.available, [DeleteRule.deny, .cascade, .nullify, .noAction])
    func aDeleteAppliesItsRuleToPairsAddedMeanwhile(kind: StoreKind, rule: DeleteRule) throws {
        let store = try TestStore(kind, types: [Shelf.self, Book.self, Crate.self, Can.self, Poster.self, Wall.self, Album.self, Song.self])
        let mine = try Context(stack: store.stack, updateTarget: .persistentStore)
        let other = kind == .memory ? store.stack : try store.reopen(types: [Shelf.self, Book.self, Crate.self, Can.self, Poster.self, Wall.self, Album.self, Song.self])
        let theirs = try Context(stack: other, updateTarget: .persistentStore)
        try mine.beginUpdateAndWait { update in
            try update.create(Shelf.self).name = "owner"
            try update.create(Crate.self).name = "owner"
            try update.create(Poster.self).name = "owner"
            try update.create(Album.self).title = "owner"
            try update.commit()
        }
        var thrown: (any Error)?
        do {
            try mine.beginUpdateAndWait { update in
                let owner: ManagedObject
                switch rule {
                case .deny:
                    let shelf = try #require(try update.fetch(Shelf.self, %"name" == "owner"))
                    #expect(shelf.books.isEmpty)
                    owner = shelf
                case .cascade:
                    let crate = try #require(try update.fetch(Crate.self, %"name" == "owner"))
                    #expect(crate.cans.isEmpty)
                    owner = crate
                case .noAction:
                    let album = try #require(try update.fetch(Album.self, %"title" == "owner"))
                    #expect(album.songs.isEmpty)
                    owner = album
                default:
                    let poster = try #require(try update.fetch(Poster.self, %"name" == "owner"))
                    #expect(poster.walls.isEmpty)
                    owner = poster
                }
                try theirs.beginUpdateAndWait { update in
                    switch rule {
                    case .deny:
                        try update.create(Book.self).shelves = [try #require(try update.fetch(Shelf.self, %"name" == "owner"))]
                    case .cascade:
                        try update.create(Can.self).crates = [try #require(try update.fetch(Crate.self, %"name" == "owner"))]
                    case .noAction:
                        try update.create(Song.self).albums = [try #require(try update.fetch(Album.self, %"title" == "owner"))]
                    default:
                        try update.create(Wall.self).posters = [try #require(try update.fetch(Poster.self, %"name" == "owner"))]
                    }
                    try update.commit()
                }
                try update.delete(owner)
                try update.commit()
            }
        } catch {
            thrown = error
        }
        let pairs = try ["Z_Book_shelves_Shelf_books", "Z_Can_crates_Crate_cans", "Z_Poster_walls_Wall_posters", "Z_Album_songs_Song_albums"].map {
            try store.writtenScalar("SELECT count(*) FROM \"\($0)\"")
        }
        switch rule {
        case .deny:
            #expect((thrown as? SaveError)?.code == .deleteDenied, "\(String(describing: thrown))")
            #expect(try store.writtenScalar("SELECT count(*) FROM \"Shelf\"") == .integer(1))
            #expect(pairs[0] == .integer(1), "the shelf keeps its new book")
        case .cascade:
            #expect(thrown == nil)
            #expect(try store.writtenScalar("SELECT count(*) FROM \"Can\"") == .integer(0), "the new can went with its crate")
            #expect(pairs[1] == .integer(0))
        case .noAction:
            #expect(thrown == nil)
            #expect(try store.writtenScalar("SELECT count(*) FROM \"Song\"") == .integer(1), "the song stays")
            #expect(try store.writtenScalar("SELECT count(*) FROM \"Album\"") == .integer(0))
            #expect(pairs[3] == .integer(0), "without the album")
        default:
            #expect(thrown == nil)
            #expect(try store.writtenScalar("SELECT count(*) FROM \"Wall\"") == .integer(1), "the wall stays")
            #expect(pairs[2] == .integer(0), "without the poster")
        }
    }
}

extension ConcurrentDeleteTests {
    /// Docs/Writing.md, "Deletes and references made meanwhile": a to-one declared without an
    /// inverse has no rule on the other side. Deleting the pet leaves `Vault.keeper` pointing
    /// at its row; reading it gives `nil`, and a later commit that changes the vault's label is
    /// saved.
    @Test(arguments: Setup.all) @MainActor
    func aToOneWithoutAnInverseToADeletedObjectReadsNil(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let recorder = ErrorRecorder()
        harness.stack.onError = { recorder.record($0) }
        let (vault, pet) = try await harness.write { update in
            let pet = try update.create(Pet.self)
            pet.name = "Rex"
            let vault = try update.create(Vault.self)
            (vault.label, vault.keeper) = ("gold", pet)
            try update.commit()
            return (vault.objectID, pet.objectID)
        }
        try await harness.write { update in
            try update.delete(#require(try update.fetch(Pet.self, id: pet)))
            try update.commit()
        }
        #expect(try harness.store.writtenScalar("SELECT count(*) FROM \"Vault\" WHERE keeper IS NOT NULL") == .integer(1))
        try await harness.write { update in
            let stored = try #require(try update.fetch(Vault.self, id: vault))
            #expect(stored.keeper == nil)
            stored.label = "silver"
            try update.commit()
        }
        #expect(recorder.all.isEmpty, "\(recorder.all)")
        #expect(try harness.store.writtenRows("SELECT label FROM \"Vault\"") == [[.text("silver")]])
    }

    /// `.noAction` leaves a reference dangling on purpose: the writer's look at a delete does
    /// not clear it, and a later commit that changes the referrer's other values is saved — a
    /// reference the context started from is not one the commit makes.
    @Test(arguments: StoreKind.available)
    func aReferenceANoActionRuleLeftIsKeptAndNotCheckedAgain(kind: StoreKind) throws {
        let store = try TestStore(kind, types: [Kennel.self, Dog.self])
        let context = try Context(stack: store.stack, updateTarget: .persistentStore)
        try context.beginUpdateAndWait { update in
            let kennel = try update.create(Kennel.self)
            kennel.name = "north"
            let dog = try update.create(Dog.self)
            dog.name = "Rex"
            dog.kennel = kennel
            try update.commit()
        }
        try context.beginUpdateAndWait { update in
            try update.delete(#require(try update.fetch(Kennel.self, %"name" == "north")))
            try update.commit()
        }
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Dog\" WHERE kennel IS NOT NULL") == .integer(1), "left as the rule says")
        // `.overwrite`, after another commit changed the dog: the whole row is written, the
        // dangling reference with it.
        let overwriting = try Context(stack: store.stack, updateTarget: .persistentStore, mergePolicy: .overwrite)
        try overwriting.beginUpdateAndWait { update in
            let dog = try #require(try update.fetch(Dog.self, %"name" == "Rex"))
            try context.beginUpdateAndWait { update in
                try #require(try update.fetch(Dog.self, %"name" == "Rex")).name = "Bruno"
                try update.commit()
            }
            dog.name = "Max"
            try update.commit()
        }
        #expect(try store.writtenRows("SELECT name, kennel IS NOT NULL FROM \"Dog\"") == [[.text("Max"), .integer(1)]])
    }

    /// `.noAction` on an object the update created and then deleted: a dog left pointing at the
    /// kennel would be saved pointing at a row that never was, so `commit()` throws
    /// `.relatesToDeletedObject` with the changes pending — under a root too, where the writer
    /// failed the whole commit in the background before. Mended, the same update commits.
    @Test(arguments: StoreKind.available)
    func aReferenceToAnObjectTheUpdateCreatedAndDeletedFailsItsCommit(kind: StoreKind) async throws {
        let store = try TestStore(kind, types: [Kennel.self, Dog.self])
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        try context.beginUpdateAndWait { update in
            let kennel = try update.create(Kennel.self)
            let dog = try update.create(Dog.self)
            (kennel.name, dog.name, dog.kennel) = ("north", "Rex", kennel)
            try update.create(Dog.self).name = "Max"
            try update.delete(kennel)
            let error = #expect(throws: SaveError.self) { try update.commit() }
            #expect(error?.code == .relatesToDeletedObject && error?.objects == [dog.objectID, kennel.objectID])
            dog.kennel = nil
            try update.commit()
        }
        try await store.stack.flush()
        #expect(recorder.all.isEmpty, "\(recorder.all)")
        #expect(try store.writtenRows("SELECT name, kennel IS NULL FROM \"Dog\" ORDER BY name") == [[.text("Max"), .integer(1)], [.text("Rex"), .integer(1)]])
    }

    /// The same through a to-one without inverse: the pet has no relationship back to the
    /// vault, so no rule of its own says anything of the reference. `commit()` says so, with
    /// the changes pending, instead of the writer failing the commit in the background as if
    /// another commit had deleted the pet.
    @Test(arguments: StoreKind.available)
    func aToOneWithoutInverseToAnObjectTheUpdateCreatedAndDeletedFailsItsCommit(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        try context.beginUpdateAndWait { update in
            let vault = try update.create(Vault.self)
            let pet = try update.create(Pet.self)
            (vault.label, vault.keeper) = ("gold", pet)
            try update.delete(pet)
            let error = #expect(throws: SaveError.self) { try update.commit() }
            #expect(error?.code == .relatesToDeletedObject && error?.objects == [vault.objectID, pet.objectID])
            #expect(error?.message.contains("this update created") == true, "\(String(describing: error))")
            vault.keeper = nil
            try update.commit()
        }
        try await store.stack.flush()
        #expect(recorder.all.isEmpty, "\(recorder.all)")
        #expect(try store.writtenRows("SELECT label, keeper IS NULL FROM \"Vault\"") == [[.text("gold"), .integer(1)]])
    }

    /// What the writer reads to keep references whole (`stack.trace`): nothing for a commit that
    /// relates objects only to objects it inserts and deletes nothing; one look-up per table
    /// for one that relates objects to stored ones.
    @Test(arguments: StoreKind.available)
    func onlyReferencesToStoredRowsAreLookedUp(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = try Context(stack: store.stack, updateTarget: .persistentStore)
        let statements = Locked<[String]>([])
        store.stack.trace { sql in statements.withLock { $0.append(sql) } }
        defer { store.stack.trace(nil) }
        func lookUps(_ body: (Update) throws -> Void) throws -> [String] {
            statements.withLock { $0.removeAll() }
            try context.beginUpdateAndWait { update in
                try body(update)
                try update.commit()
            }
            return statements.withLock { $0 }.filter { $0.contains("SELECT \"Z_PK\" FROM") && $0.contains("ORDER BY \"Z_PK\"") }
        }
        #expect(try lookUps { update in
            let monk = try update.create(Person.self)
            monk.name = "Monk"
            let rex = try update.create(Pet.self)
            rex.name = "Rex"
            rex.owner = monk
        } == [])
        #expect(try lookUps { update in try #require(try update.fetch(Pet.self, %"name" == "Rex")).age = 4 } == [])
        let looked = try lookUps { update in
            let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
            for name in ["Fido", "Bella"] {
                let pet = try update.create(Pet.self)
                pet.name = name
                pet.owner = monk
            }
        }
        #expect(looked.count == 1 && looked.allSatisfy { $0.contains("\"Person\"") }, "\(looked)")
    }
}

extension ConcurrentDeleteTests {
    /// What a group with a commit that fails at the writer leaves: a store whose main context
    /// (three-tier: its own updates' commits are what it is shown, and merges) commits `seed`
    /// and has it written, holds what `hold` fetches, then, while the writer's queue is
    /// suspended, makes `failing`'s commits and one of Ada, so that the writer takes them in
    /// one group. Returns once the flush after it threw, and the main actor had a turn.
    @MainActor static func aGroupWithACommitFailingInTheBackground<Held>(
        _ kind: StoreKind, seed: (Update) throws -> Void, hold: (MainContext) throws -> Held,
        failing: (MainContext) throws -> Void
    ) async throws -> (store: TestStore, world: MainContext, held: Held, errors: [any Error]) {
        let store = try TestStore(kind)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try seed(update)
            try update.commit()
        }
        try await store.stack.flush()
        let held = try hold(world)
        try store.withWriterQueueSuspended {
            try failing(world)
            try world.beginUpdateAndWait { update in
                try update.create(Person.self).name = "Ada"
                try update.commit()
            }
        }
        await #expect(throws: (any Error).self) { try await store.stack.flush() }
        await mainQueueTurn()
        return (store, world, held, recorder.all)
    }

    /// In one process, in the background: a commit to the root deletes the monk; another,
    /// made by an update that read him before, gives Rex to him. The writer takes both in one
    /// group. The second fails alone — `stack.onError` and `flush()` get its error, the main
    /// context that was shown it has it undone — and the rest of the group is stored.
    @Test(arguments: StoreKind.available) @MainActor
    func inTheBackgroundTheCommitFailsAloneAndIsUndone(kind: StoreKind) async throws {
        let (store, world, rex, errors) = try await Self.aGroupWithACommitFailingInTheBackground(kind, seed: { update in
            try update.create(Person.self).name = "Monk"
            try update.create(Pet.self).name = "Rex"
        }, hold: { world in
            try #require(try world.fetch(Pet.self, %"name" == "Rex"))
        }, failing: { world in
            try world.beginUpdateAndWait { update in
                let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
                try world.beginUpdateAndWait { update in
                    try update.delete(#require(try update.fetch(Person.self, %"name" == "Monk")))
                    try update.commit()
                }
                try #require(try update.fetch(Pet.self, %"name" == "Rex")).owner = monk
                try update.commit()
            }
        })
        #expect(errors.map { ($0 as? SaveError)?.code } == [.relatesToDeletedObject])
        #expect(try store.writtenRows("SELECT name FROM \"Person\"") == [[.text("Ada")]])
        #expect(try store.writtenRows("SELECT owner FROM \"Pet\"") == [[.null]])
        #expect(rex.owner == nil, "the main context has the failed commit undone")
        #expect(try world.fetchAll(Person.self).map(\.name) == ["Ada"])
    }

    /// The same for a cascade (Docs/Writing.md, "A cascade does not delete an object moved
    /// away meanwhile"): a commit whose cascade would take a pet another commit gave the knight
    /// meanwhile fails alone at the writer with `MergeConflictError`, and the main context that
    /// was shown it has the monk back, with only the pet still his.
    @Test(arguments: StoreKind.available) @MainActor
    func inTheBackgroundACascadeOverAMovedPetFailsAloneAndIsUndone(kind: StoreKind) async throws {
        let (store, _, monk, errors) = try await Self.aGroupWithACommitFailingInTheBackground(kind, seed: { update in
            let monk = try update.create(Person.self)
            monk.name = "Monk"
            try update.create(Person.self).name = "Knight"
            for name in ["Fido", "Rex"] {
                let pet = try update.create(Pet.self)
                (pet.name, pet.owner) = (name, monk)
            }
        }, hold: { world in
            let monk = try #require(try world.fetch(Person.self, %"name" == "Monk"))
            #expect(monk.pets.map(\.name).sorted() == ["Fido", "Rex"])
            return monk
        }, failing: { world in
            try world.beginUpdateAndWait { update in
                let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
                #expect(monk.pets.count == 2)
                try world.beginUpdateAndWait { update in
                    try #require(try update.fetch(Pet.self, %"name" == "Rex")).owner = try update.fetch(Person.self, %"name" == "Knight")
                    try update.commit()
                }
                try update.delete(monk)
                try update.commit()
            }
        })
        #expect(errors.count == 1 && errors.first is MergeConflictError, "\(errors)")
        #expect(try store.writtenRows("SELECT name FROM \"Person\" ORDER BY name") == [[.text("Ada")], [.text("Knight")], [.text("Monk")]])
        #expect(try store.writtenRows("""
            SELECT "Pet".name, "Person".name FROM "Pet" JOIN "Person" ON "Person"."Z_PK" = "Pet".owner ORDER BY "Pet".name
            """) == [[.text("Fido"), .text("Monk")], [.text("Rex"), .text("Knight")]])
        #expect(!monk.isDeleted, "the main context has the failed commit undone")
        #expect(monk.pets.map(\.name) == ["Fido"])
    }

    /// The same for `.deny` (Docs/Errors.md): the update read the vault's coins (none),
    /// another commit put a coin in meanwhile, and the vault's delete fails alone with
    /// `.deleteDenied`; the main context that was shown it has the vault back, the coin in it.
    @Test(arguments: StoreKind.available) @MainActor
    func inTheBackgroundADeniedDeleteFailsAloneAndIsUndone(kind: StoreKind) async throws {
        let (store, _, vault, errors) = try await Self.aGroupWithACommitFailingInTheBackground(kind, seed: { update in
            try update.create(Vault.self).label = "gold"
        }, hold: { world in
            let vault = try #require(try world.fetch(Vault.self))
            #expect(vault.coins.isEmpty)
            return vault
        }, failing: { world in
            try world.beginUpdateAndWait { update in
                let vault = try #require(try update.fetch(Vault.self))
                #expect(vault.coins.isEmpty)
                try world.beginUpdateAndWait { update in
                    try update.create(Coin.self).vault = try update.fetch(Vault.self)
                    try update.commit()
                }
                try update.delete(vault)
                try update.commit()
            }
        })
        #expect(errors.map { ($0 as? SaveError)?.code } == [.deleteDenied], "\(errors)")
        #expect(try store.writtenRows("SELECT label FROM \"Vault\"") == [[.text("gold")]])
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Coin\" WHERE vault IS NOT NULL") == .integer(1))
        #expect(try store.writtenRows("SELECT name FROM \"Person\"") == [[.text("Ada")]])
        #expect(!vault.isDeleted, "the main context has the failed commit undone")
        #expect(vault.coins.count == 1)
    }
}

extension ConcurrentDeleteTests {
    /// A one-to-one keeps a column on both sides: the passport another commit gave Alice
    /// while this context deleted her (having read no passport) lets go of her.
    @Test(arguments: StoreKind.available)
    func aOneToOneAddedMeanwhileLetsGo(kind: StoreKind) throws {
        let fixture = try Fixture(kind)
        try fixture.commitMine { update in try update.create(Citizen.self).name = "Alice" }
        try fixture.commitMine { update in
            let alice = try #require(try update.fetch(Citizen.self, %"name" == "Alice"))
            #expect(alice.passport == nil)
            try fixture.commitTheirs { update in
                let passport = try update.create(Passport.self)
                passport.number = "P1"
                passport.holder = try update.fetch(Citizen.self, %"name" == "Alice")
            }
            try update.delete(alice)
        }
        #expect(try fixture.stored("SELECT number, holder FROM \"Passport\"") == [[.text("P1"), .null]])
        #expect(try fixture.stored("SELECT count(*) FROM \"Citizen\"") == [[.integer(0)]])
    }

    /// `.overwrite` writes the whole object back when another commit changed it: here that
    /// commit deleted the knight's friend, and its rule cleared the knight's reference. Written
    /// back, the reference would name a row that is gone; the commit fails instead.
    @Test(arguments: StoreKind.available)
    func anOverwriteDoesNotWriteBackAReferenceToARowDeletedMeanwhile(kind: StoreKind) throws {
        let fixture = try Fixture(kind)
        try fixture.commitMine { update in
            let knight = try update.create(Person.self)
            knight.name = "Knight"
            let monk = try update.create(Person.self)
            monk.name = "Monk"
            knight.friend = monk
        }
        let overwriting = try Context(stack: fixture.store.stack, updateTarget: .persistentStore, mergePolicy: .overwrite)
        var thrown: SaveError?
        do {
            try overwriting.beginUpdateAndWait { update in
                let knight = try #require(try update.fetch(Person.self, %"name" == "Knight"))
                #expect(knight.friend?.name == "Monk")
                try fixture.commitTheirs { update in
                    try update.delete(#require(try update.fetch(Person.self, %"name" == "Monk")))
                }
                knight.age = 40
                try update.commit()
            }
        } catch let error as SaveError {
            thrown = error
        }
        #expect(thrown?.code == .relatesToDeletedObject)
        #expect(try fixture.stored("SELECT name, age, friend FROM \"Person\"") == [[.text("Knight"), .integer(0), .null]])
    }
}

extension ConcurrentDeleteTests {
    /// Sub-entities share their parent's table: an engineer another commit put in the team
    /// this context deleted (having read no members) lets go of it; a manager in a team that
    /// stays keeps its team.
    @Test(arguments: StoreKind.available)
    func aSubEntityAddedMeanwhileLetsGo(kind: StoreKind) throws {
        let fixture = try Fixture(kind)
        try fixture.commitMine { update in
            try update.create(Team.self).title = "gone"
            let kept = try update.create(Team.self)
            kept.title = "kept"
        }
        try fixture.commitMine { update in
            let team = try #require(try update.fetch(Team.self, %"title" == "gone"))
            #expect(team.members.isEmpty)
            try fixture.commitTheirs { update in
                let engineer = try update.create(Engineer.self)
                engineer.name = "Ada"
                engineer.team = try update.fetch(Team.self, %"title" == "gone")
                let manager = try update.create(Manager.self)
                manager.name = "Grace"
                manager.team = try update.fetch(Team.self, %"title" == "kept")
            }
            try update.delete(team)
        }
        #expect(try fixture.stored("SELECT \"Staff\".name, \"Team\".title FROM \"Staff\" LEFT JOIN \"Team\" ON \"Team\".\"Z_PK\" = \"Staff\".team ORDER BY \"Staff\".name")
                == [[.text("Ada"), .null], [.text("Grace"), .text("kept")]])
        #expect(try fixture.stored("SELECT count(*) FROM \"Staff\" WHERE team IS NOT NULL AND team NOT IN (SELECT \"Z_PK\" FROM \"Team\")")
                == [[.integer(0)]])
    }
}

extension ConcurrentDeleteTests {
    /// `.noAction` on both sides of a many-to-many: a commit that deletes both ends of a pair
    /// leaves the pair to the writer, which removes it. Neither end is reported changed after
    /// being reported deleted (the commit goes to the root, so its receivers get the writer's
    /// correction on its own).
    @Test(arguments: StoreKind.available) @MainActor
    func aPairBothOfWhoseEndsAreDeletedIsRemovedWithoutReportingThemChanged(kind: StoreKind) async throws {
        let store = try TestStore(kind, types: [Album.self, Song.self])
        let context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: true))
        let ids = try context.beginUpdateAndWait { update -> [ObjectID] in
            let album = try update.create(Album.self)
            album.title = "Blue"
            let song = try update.create(Song.self)
            song.title = "River"
            album.songs.insert(song)
            try update.commit()
            return [album.objectID, song.objectID]
        }
        try await store.stack.flush()
        let commits = Locked<[Commit]>([])
        let observation = store.stack.observeCommit { commit in commits.withLock { $0.append(commit) } }
        defer { observation.cancel() }
        try context.beginUpdateAndWait { update in
            try update.delete(#require(try update.fetch(Album.self, id: ids[0])))
            try update.delete(#require(try update.fetch(Song.self, id: ids[1])))
            try update.commit()
        }
        try await store.stack.flush()
        await mainQueueTurn()
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Z_Album_songs_Song_albums\"") == .integer(0))
        let seen = commits.withLock { $0 }
        #expect(seen.contains { Set($0.deleted) == Set(ids) })
        #expect(!seen.contains { !Set($0.updated).isDisjoint(with: ids) }, "\(seen.map(\.updated))")
    }

    /// An object this update made, paired with a stored one and then deleted (its side's rule
    /// `.noAction` does not let go of the pair): the pair goes with it. Before, it was kept in
    /// the commit, pointing at a row that was never stored (now the writer would refuse it).
    @Test(arguments: StoreKind.available)
    func aPairWithAnObjectMadeAndDeletedInOneUpdateGoesWithIt(kind: StoreKind) throws {
        let store = try TestStore(kind, types: [Album.self, Song.self])
        let context = try Context(stack: store.stack, updateTarget: .persistentStore)
        try context.beginUpdateAndWait { update in
            try update.create(Album.self).title = "Blue"
            try update.commit()
        }
        try context.beginUpdateAndWait { update in
            let album = try #require(try update.fetch(Album.self, %"title" == "Blue"))
            let song = try update.create(Song.self)
            album.songs.insert(song)
            try update.delete(song)
            album.title = "Blue (remastered)"
            try update.commit()
        }
        #expect(try store.writtenRows("SELECT title FROM \"Album\"") == [[.text("Blue (remastered)")]])
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Z_Album_songs_Song_albums\"") == .integer(0))
    }

    /// A view pinned when a deal had a buyer and a seller: another commit related them while
    /// this context deleted both traders (having read their deals, none). The writer clears
    /// both of the deal's references, two updates of one row in one commit; the pinned view
    /// still shows both as they were.
    @Test(arguments: StoreKind.available) @MainActor
    func aPinnedViewKeepsEveryReferenceTheWriterClears(kind: StoreKind) throws {
        let types: [ManagedObject.Type] = [Trader.self, Deal.self]
        let store = try TestStore(kind, types: types)
        let mine = try Context(stack: store.stack, updateTarget: .persistentStore)
        let theirs = try Context(stack: kind == .memory ? store.stack : try store.reopen(types: types), updateTarget: .persistentStore)
        let (buyer, seller) = try mine.beginUpdateAndWait { update -> (ObjectID, ObjectID) in
            let buyer = try update.create(Trader.self)
            buyer.name = "buyer"
            let seller = try update.create(Trader.self)
            seller.name = "seller"
            try update.create(Deal.self).price = 10
            try update.commit()
            return (buyer.objectID, seller.objectID)
        }
        var world: MainContext?
        try mine.beginUpdateAndWait { update in
            let traders = try [buyer, seller].map { try #require(try update.fetch(Trader.self, id: $0)) }
            #expect(traders[0].bought.isEmpty && traders[1].sold.isEmpty)
            try theirs.beginUpdateAndWait { update in
                let deal = try #require(try update.fetchAll(Deal.self).first)
                deal.buyer = try update.fetch(Trader.self, id: buyer)
                deal.seller = try update.fetch(Trader.self, id: seller)
                try update.commit()
            }
            // Pinned now: the deal has both.
            world = try MainContext(stack: store.stack, updateTarget: .persistentStore)
            for trader in traders { try update.delete(trader) }
            try update.commit()
        }
        #expect(try store.writtenRows("SELECT buyer, seller FROM \"Deal\"") == [[.null, .null]])
        let deal = try #require(try world?.fetchAll(Deal.self).first)
        #expect(deal.buyer?.objectID == buyer)
        #expect(deal.seller?.objectID == seller)
    }
}

extension ConcurrentDeleteTests {
    /// In one process: a delete waits in the writer's queue, and its `.nullify` rule will clear
    /// the knight's reference to the deleted monk (another commit made the monk the knight's
    /// friend after the deleting update read the monk's `friendOf`). Meanwhile an `.overwrite`
    /// commit that read the knight when the reference was there writes the whole knight back,
    /// after a conflict on another property. It must not write the reference back: the writer
    /// resolves it again against the row as the rule left it, and the commit fails as one
    /// relating the knight to a row that is gone.
    @Test(arguments: StoreKind.available) @MainActor
    func anOverwriteQueuedBehindADeleteDoesNotRestoreAReferenceItsRuleCleared(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let direct = try Context(stack: store.stack, updateTarget: .persistentStore)
        let deleter = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        let overwriting = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false), mergePolicy: .overwrite)
        try direct.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Monk"
            try update.create(Person.self).name = "Knight"
            try update.commit()
        }
        try await store.stack.flush()
        // Two long-lived updates, each run in steps.
        let deleting = deleter.beginUpdateContext()
        let overwrite = overwriting.beginUpdateContext()
        try deleting.performAndWait { update in
            let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
            #expect(monk.friendOf.isEmpty)
            try update.delete(monk)   // its rules run now, over what it knows
        }
        // Another commit makes the monk the knight's friend; the deleting update does not know.
        try direct.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, %"name" == "Knight")).friend = try update.fetch(Person.self, %"name" == "Monk")
            try update.commit()
        }
        try overwrite.performAndWait { update in
            let knight = try #require(try update.fetch(Person.self, %"name" == "Knight"))
            #expect(knight.friend?.name == "Monk")
        }
        // A conflict on another property, so that .overwrite writes the whole row.
        try direct.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, %"name" == "Knight")).age = 9
            try update.commit()
        }
        try await store.stack.flush()
        try store.withWriterQueueSuspended {
            try deleting.performAndWait { update in try update.commit() }   // queued
            try overwrite.performAndWait { update in
                try #require(try update.fetch(Person.self, %"name" == "Knight")).location = "Camelot"
                try update.commit()   // queued behind the delete
            }
        }
        await #expect(throws: SaveError.self) { try await store.stack.flush() }
        #expect(recorder.all.map { ($0 as? SaveError)?.code } == [.relatesToDeletedObject])
        #expect(try store.writtenRows("SELECT name, age, location, friend FROM \"Person\"") == [[.text("Knight"), .integer(9), .null, .null]])
    }
}

extension ConcurrentDeleteTests {
    /// PostgreSQL: a row another writer has locked to update it (`FOR NO KEY UPDATE`, what a
    /// group of commits takes up front) does not hold up a commit that only refers to it: the
    /// reference's `FOR KEY SHARE` does not conflict with that lock. (Under `FOR UPDATE`, the
    /// lock groups took before, the commit waited until the other transaction ended.)
    @Test(.enabled(if: PostgresServer.isAvailable))
    func aReferenceDoesNotWaitForARowLockedForUpdate() throws {
        let store = try TestStore(.postgres)
        let context = try Context(stack: store.stack, updateTarget: .persistentStore)
        let monk = try context.beginUpdateAndWait { update -> ObjectID in
            let monk = try update.create(Person.self)
            monk.name = "Monk"
            try update.commit()
            return monk.objectID
        }
        let url = try #require(store.database?.url)
        let other = try PostgresConnection(PostgresSettings(url: url))
        try other.execute("BEGIN")
        try other.execute("SELECT 1 FROM \"Person\" WHERE \"Z_PK\" = \(monk.primaryKey) FOR NO KEY UPDATE")
        let written = DispatchSemaphore(value: 0)
        let outcome = Locked<(any Error)?>(nil)
        let thread = Thread {
            do {
                try context.beginUpdateAndWait { update in
                    let rex = try update.create(Pet.self)
                    rex.name = "Rex"
                    rex.owner = try update.fetch(Person.self, id: monk)
                    try update.commit()
                }
            } catch {
                outcome.withLock { $0 = error }
            }
            written.signal()
        }
        thread.start()
        // A bound for a hang, not a measure of speed: the commit is one round trip.
        let finished = written.wait(timeout: .now() + 30) == .success
        try other.execute("COMMIT")
        if !finished { written.wait() }
        #expect(finished, "the commit waited for the other transaction's lock")
        #expect(outcome.withLock { $0 } == nil)
        #expect(try store.writtenScalar("SELECT count(*) FROM \"Pet\" WHERE owner = \(monk.primaryKey)") == .integer(1))
    }
}

extension ConcurrentDeleteTests {
    /// `.cascade` across a one-to-one: the key another commit gave the locker this context
    /// deleted (having read no key) goes with the locker, as the rule says, instead of only
    /// letting go of it.
    @Test(arguments: StoreKind.available)
    func aOneToOneCascadeReachesTheOtherSideAddedMeanwhile(kind: StoreKind) throws {
        let fixture = try Fixture(kind, types: [Locker.self, LockerKey.self])
        try fixture.commitMine { update in try update.create(Locker.self).label = "A1" }
        try fixture.commitMine { update in
            let locker = try #require(try update.fetch(Locker.self, %"label" == "A1"))
            #expect(locker.key == nil)
            try fixture.commitTheirs { update in
                try update.create(LockerKey.self).locker = try update.fetch(Locker.self, %"label" == "A1")
            }
            try update.delete(locker)
        }
        #expect(try fixture.stored("SELECT count(*) FROM \"LockerKey\"") == [[.integer(0)]])
        #expect(try fixture.stored("SELECT count(*) FROM \"Locker\"") == [[.integer(0)]])
    }

    /// `.deny` across a one-to-one: the key another commit gave the safe this context deletes
    /// (having read no key) denies the delete. The commit fails whole with `.deleteDenied`, and
    /// the safe and its key stay.
    @Test(arguments: StoreKind.available)
    func aOneToOneDenyRefusesADeleteOfAnObjectGivenItsOtherSideMeanwhile(kind: StoreKind) throws {
        let fixture = try Fixture(kind, types: [Safe.self, SafeKey.self])
        try fixture.commitMine { update in try update.create(Safe.self).label = "S1" }
        let thrown = try fixture.saveErrorOfMine { update in
            let safe = try #require(try update.fetch(Safe.self, %"label" == "S1"))
            #expect(safe.key == nil)
            try fixture.commitTheirs { update in
                try update.create(SafeKey.self).safe = try update.fetch(Safe.self, %"label" == "S1")
            }
            try update.delete(safe)
        }
        #expect(thrown?.code == .deleteDenied, "\(String(describing: thrown))")
        #expect(try fixture.stored("SELECT count(*) FROM \"Safe\"") == [[.integer(1)]])
        #expect(try fixture.stored("SELECT count(*) FROM \"SafeKey\" WHERE safe IS NOT NULL") == [[.integer(1)]])
    }
}

extension ConcurrentDeleteTests {
    // MARK: - A cascade over an object moved away meanwhile

    /// This context reads the monk's pets, Rex and Fido; another commit gives Rex to the knight;
    /// this context deletes the monk. `.cascade` would delete the knight's pet: the commit
    /// fails with `MergeConflictError` naming Rex — under every merge policy, as the conflict is
    /// not between two values of a property — and nothing of it is saved. Fetched again, the
    /// monk has only Fido, and deleting him takes Fido alone.
    @Test(arguments: StoreKind.available, [MergePolicy.objectTrump, .error])
    func aCascadeDoesNotDeleteAPetGivenToAnotherOwnerMeanwhile(kind: StoreKind, policy: MergePolicy) throws {
        let fixture = try Fixture(kind, mergePolicy: policy)
        let (rex, monk, knight) = try fixture.commitMine { update -> (ObjectID, ObjectID, ObjectID) in
            let monk = try update.create(Person.self)
            monk.name = "Monk"
            let knight = try update.create(Person.self)
            knight.name = "Knight"
            let rex = try update.create(Pet.self)
            (rex.name, rex.owner) = ("Rex", monk)
            let fido = try update.create(Pet.self)
            (fido.name, fido.owner) = ("Fido", monk)
            return (rex.objectID, monk.objectID, knight.objectID)
        }
        let conflict = try fixture.conflictOfMine { update in
            let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
            #expect(monk.pets.map(\.name).sorted() == ["Fido", "Rex"])
            try fixture.commitTheirs { update in
                try #require(try update.fetch(Pet.self, %"name" == "Rex")).owner = try update.fetch(Person.self, %"name" == "Knight")
            }
            try update.delete(monk)
            try update.create(Person.self).name = "Bishop"
        }
        let error = try #require(conflict, "the knight's pet was deleted")
        #expect(error.objectIDs == [rex])
        // Rex's side of the relationship: the deleted monk's key read, the knight's stored.
        #expect(error.conflicts.map(\.key) == ["owner"])
        #expect(error.conflicts.first?.snapshot == .integer(monk.primaryKey) && error.conflicts.first?.stored == .integer(knight.primaryKey),
                "\(error)")
        #expect(error.description.contains("cascade"), "\(error)")
        #expect(try fixture.stored("SELECT name FROM \"Person\" ORDER BY name") == [[.text("Knight")], [.text("Monk")]],
                "nothing of the commit is saved")
        #expect(try fixture.stored("""
            SELECT "Pet".name, "Person".name FROM "Pet" JOIN "Person" ON "Person"."Z_PK" = "Pet".owner ORDER BY "Pet".name
            """) == [[.text("Fido"), .text("Monk")], [.text("Rex"), .text("Knight")]])
        try fixture.commitMine { update in
            let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
            #expect(monk.pets.map(\.name) == ["Fido"])
            try update.delete(monk)
        }
        #expect(try fixture.stored("SELECT name FROM \"Pet\"") == [[.text("Rex")]])
    }

    /// Sibling sub-entities may each declare a relationship of one name: a shelter's animals
    /// are dogs, a farm's are cows, stored apart (the dog's and the cow's keys are the same
    /// number in their own tables). The check keeps them apart: the cow another commit moved
    /// to another farm is the conflict, the dog goes with its shelter.
    @Test(arguments: StoreKind.available)
    func aCascadeCheckKeepsSameNamedRelationshipsOfSiblingSubEntitiesApart(kind: StoreKind) throws {
        let fixture = try Fixture(kind, types: [Keeper.self, Shelter.self, Farm.self, ShelterDog.self, FarmCow.self])
        let (dog, cow) = try fixture.commitMine { update -> (ObjectID, ObjectID) in
            let shelter = try update.create(Shelter.self)
            shelter.name = "shelter"
            let farm = try update.create(Farm.self)
            farm.name = "farm"
            try update.create(Farm.self).name = "other farm"
            let dog = try update.create(ShelterDog.self)
            dog.shelter = shelter
            let cow = try update.create(FarmCow.self)
            cow.farm = farm
            return (dog.objectID, cow.objectID)
        }
        try #require(dog.primaryKey == cow.primaryKey, "the test needs one key in both tables")
        let conflict = try fixture.conflictOfMine { update in
            let shelter = try #require(try update.fetch(Shelter.self))
            let farm = try #require(try update.fetch(Farm.self, %"name" == "farm"))
            #expect(shelter.animals.count == 1 && farm.animals.count == 1)
            try fixture.commitTheirs { update in
                try #require(try update.fetch(FarmCow.self)).farm = try update.fetch(Farm.self, %"name" == "other farm")
            }
            try update.delete(shelter)
            try update.delete(farm)
        }
        #expect(conflict?.objectIDs == [cow], "\(String(describing: conflict))")
        #expect(try fixture.stored("SELECT count(*) FROM \"FarmCow\"") == [[.integer(1)]])
        #expect(try fixture.stored("SELECT count(*) FROM \"ShelterDog\"") == [[.integer(1)]], "nothing of the commit is saved")
    }

    /// The writer's check reads every cascaded pet's owner in one statement, however many
    /// people the commit deletes (per relationship, not per object: on PostgreSQL a statement
    /// is a round trip).
    @Test(arguments: StoreKind.available)
    func theCascadeCheckReadsOnceARelationship(kind: StoreKind) throws {
        let fixture = try Fixture(kind)
        try fixture.commitMine { update in
            for index in 0..<50 {
                let person = try update.create(Person.self)
                person.name = "P\(index)"
                for _ in 0..<2 { try update.create(Pet.self).owner = person }
            }
        }
        let statements = Locked<[String]>([])
        fixture.store.stack.trace { sql in statements.withLock { $0.append(sql) } }
        defer { fixture.store.stack.trace(nil) }
        try fixture.commitMine { update in
            for person in try update.fetchAll(Person.self) {
                _ = person.pets.count
                try update.delete(person)
            }
        }
        let checks = statements.withLock { $0 }.filter { $0.contains("SELECT \"Z_PK\", \"owner\" FROM \"Pet\"") }
        #expect(checks.count == 1, "\(checks)")
        #expect(try fixture.stored("SELECT count(*) FROM \"Pet\"") == [[.integer(0)]])
    }

    /// A pet moved meanwhile between two people this commit deletes is no conflict: the rule
    /// of its new owner, deleted too, takes it — as the writer's look at what is stored does.
    @Test(arguments: StoreKind.available)
    func aCascadeOverAPetMovedBetweenTwoDeletedOwnersIsSaved(kind: StoreKind) throws {
        let fixture = try Fixture(kind, mergePolicy: .error)
        try fixture.commitMine { update in
            let monk = try update.create(Person.self)
            monk.name = "Monk"
            try update.create(Person.self).name = "Knight"
            let rex = try update.create(Pet.self)
            (rex.name, rex.owner) = ("Rex", monk)
        }
        try fixture.commitMine { update in
            let people = try update.fetchAll(Person.self, orderBy: .ascending("name"))
            #expect(people.map(\.pets.count) == [0, 1])
            try fixture.commitTheirs { update in
                try #require(try update.fetch(Pet.self)).owner = try update.fetch(Person.self, %"name" == "Knight")
            }
            for person in people { try update.delete(person) }
        }
        #expect(try fixture.stored("SELECT count(*) FROM \"Person\"") == [[.integer(0)]])
        #expect(try fixture.stored("SELECT count(*) FROM \"Pet\"") == [[.integer(0)]])
    }

    /// The same across a many-to-many relationship (the can left this crate for another) and
    /// a one-to-one (the key now opens another locker).
    @Test(arguments: StoreKind.available, [false, true])
    func aCascadeDoesNotDeleteAnObjectMovedAwayMeanwhileAcrossAPairOrAOneToOne(kind: StoreKind, oneToOne: Bool) throws {
        let fixture = try Fixture(kind, types: [Crate.self, Can.self, Locker.self, LockerKey.self])
        let moved = try fixture.commitMine { update -> ObjectID in
            if oneToOne {
                let first = try update.create(Locker.self)
                first.label = "A1"
                try update.create(Locker.self).label = "A2"
                let key = try update.create(LockerKey.self)
                key.locker = first
                return key.objectID
            }
            let first = try update.create(Crate.self)
            first.name = "first"
            try update.create(Crate.self).name = "second"
            let can = try update.create(Can.self)
            can.crates = [first]
            try update.create(Can.self).crates = [first]
            return can.objectID
        }
        let conflict = try fixture.conflictOfMine { update in
            if oneToOne {
                let locker = try #require(try update.fetch(Locker.self, %"label" == "A1"))
                #expect(locker.key?.objectID == moved)
                try fixture.commitTheirs { update in
                    try #require(try update.fetch(LockerKey.self)).locker = try update.fetch(Locker.self, %"label" == "A2")
                }
                try update.delete(locker)
            } else {
                let crate = try #require(try update.fetch(Crate.self, %"name" == "first"))
                #expect(crate.cans.count == 2)
                try fixture.commitTheirs { update in
                    let can = try #require(try update.fetch(Can.self, id: moved))
                    can.crates = [try #require(try update.fetch(Crate.self, %"name" == "second"))]
                }
                try update.delete(crate)
            }
        }
        #expect(conflict?.objectIDs == [moved], "\(String(describing: conflict))")
        // Docs/Writing.md: the key of the moved object's side; `stored` its value now (the
        // other locker's key), `.null` across a pair; `snapshot` the deleted object's key.
        #expect(conflict?.conflicts.count == 1, "\(String(describing: conflict))")
        let entry = try #require(conflict?.conflicts.first)
        let key = { (sql: String) in try fixture.stored(sql).first?.first ?? .null }
        let deleted = try key(oneToOne ? #"SELECT "Z_PK" FROM "Locker" WHERE label = 'A1'"# : #"SELECT "Z_PK" FROM "Crate" WHERE name = 'first'"#)
        let other = oneToOne ? try key(#"SELECT "Z_PK" FROM "Locker" WHERE label = 'A2'"#) : .null
        #expect(entry.key == (oneToOne ? "locker" : "crates") && entry.snapshot == deleted && entry.stored == other, "\(entry)")
        if oneToOne {
            #expect(try fixture.stored("SELECT label FROM \"Locker\" ORDER BY label") == [[.text("A1")], [.text("A2")]])
            #expect(try fixture.stored("SELECT count(*) FROM \"LockerKey\"") == [[.integer(1)]])
        } else {
            #expect(try fixture.stored("SELECT count(*) FROM \"Crate\"") == [[.integer(2)]])
            #expect(try fixture.stored("SELECT count(*) FROM \"Can\"") == [[.integer(2)]])
            #expect(try fixture.stored("SELECT count(*) FROM \"Z_Can_crates_Crate_cans\"") == [[.integer(2)]])
        }
    }

    /// What the app deletes itself is deleted, moved or not; a pet another commit deleted
    /// meanwhile, or one still the monk's, is no conflict.
    @Test(arguments: StoreKind.available, [false, true])
    func aCascadeOverAnObjectTheAppDeletesOrThatWasDeletedMeanwhileIsSaved(kind: StoreKind, deletedMeanwhile: Bool) throws {
        let fixture = try Fixture(kind, mergePolicy: .error)
        try fixture.commitMine { update in
            let monk = try update.create(Person.self)
            monk.name = "Monk"
            try update.create(Person.self).name = "Knight"
            for name in ["Rex", "Fido", "Max"] {
                let pet = try update.create(Pet.self)
                (pet.name, pet.owner) = (name, monk)
            }
        }
        try fixture.commitMine { update in
            let monk = try #require(try update.fetch(Person.self, %"name" == "Monk"))
            #expect(monk.pets.count == 3)
            try fixture.commitTheirs { update in
                let knight = try update.fetch(Person.self, %"name" == "Knight")
                if deletedMeanwhile {
                    try update.delete(#require(try update.fetch(Pet.self, %"name" == "Rex")))
                } else {
                    try #require(try update.fetch(Pet.self, %"name" == "Rex")).owner = knight
                }
            }
            let rex = monk.pets.first { $0.name == "Rex" }
            try update.delete(monk)
            if !deletedMeanwhile {
                // The app's own delete of the pet its owner's cascade reached: the app's wins.
                try update.delete(#require(rex))
            }
        }
        #expect(try fixture.stored("SELECT name FROM \"Person\"") == [[.text("Knight")]])
        #expect(try fixture.stored("SELECT count(*) FROM \"Pet\"") == [[.integer(0)]])
    }

    /// A cascade over a relationship this update made — from an object it made, or one it
    /// gave the pet to — reaches what no row of the store relates: the delete is the app's
    /// doing, and saved.
    @Test(arguments: StoreKind.available, [false, true])
    func aCascadeOverARelationshipTheUpdateMadeIsSaved(kind: StoreKind, ownerIsNew: Bool) throws {
        let fixture = try Fixture(kind, mergePolicy: .error)
        try fixture.commitMine { update in
            try update.create(Person.self).name = "Knight"
            let rex = try update.create(Pet.self)
            (rex.name, rex.owner) = ("Rex", try update.fetch(Person.self, %"name" == "Knight"))
            try update.create(Person.self).name = "Monk"
        }
        try fixture.commitMine { update in
            let owner = ownerIsNew ? try update.create(Person.self) : try #require(try update.fetch(Person.self, %"name" == "Monk"))
            try #require(try update.fetch(Pet.self, %"name" == "Rex")).owner = owner
            try update.delete(owner)
        }
        #expect(try fixture.stored("SELECT count(*) FROM \"Pet\"") == [[.integer(0)]])
        #expect(try fixture.stored("SELECT name FROM \"Person\" ORDER BY name") == [[.text("Knight")]] + (ownerIsNew ? [[.text("Monk")]] : []))
    }

    /// The same across a pair this update added, and a one-to-one this update set.
    @Test(arguments: StoreKind.available, [false, true])
    func aCascadeOverAPairOrAOneToOneTheUpdateMadeIsSaved(kind: StoreKind, oneToOne: Bool) throws {
        let fixture = try Fixture(kind, types: [Crate.self, Can.self, Locker.self, LockerKey.self], mergePolicy: .error)
        try fixture.commitMine { update in
            try update.create(Crate.self).name = "first"
            try update.create(Can.self)
            try update.create(Locker.self).label = "A1"
            try update.create(LockerKey.self)
        }
        try fixture.commitMine { update in
            if oneToOne {
                let locker = try #require(try update.fetch(Locker.self))
                locker.key = try update.fetch(LockerKey.self)
                try update.delete(locker)
            } else {
                let crate = try #require(try update.fetch(Crate.self))
                try #require(try update.fetch(Can.self)).crates = [crate]
                try update.delete(crate)
            }
        }
        #expect(try fixture.stored("SELECT count(*) FROM \"\(oneToOne ? "LockerKey" : "Can")\"") == [[.integer(0)]])
    }
}

/// Sibling sub-entities with relationships of one name, stored apart.
@Entity class Keeper: ManagedObject {
    var name: String = ""
}

@Entity final class Shelter: Keeper {
    @Relationship(deleteRule: .cascade, inverse: \ShelterDog.shelter) var animals: Set<ShelterDog>
}

@Entity final class Farm: Keeper {
    @Relationship(deleteRule: .cascade, inverse: \FarmCow.farm) var animals: Set<FarmCow>
}

@Entity final class ShelterDog: ManagedObject {
    @Relationship var shelter: Shelter?
}

@Entity final class FarmCow: ManagedObject {
    @Relationship var farm: Farm?
}

@Entity final class Safe: ManagedObject {
    var label: String = ""
    @Relationship(deleteRule: .deny, inverse: \SafeKey.safe) var key: SafeKey?
}

@Entity final class SafeKey: ManagedObject {
    @Relationship var safe: Safe?
}

@Entity final class Locker: ManagedObject {
    var label: String = ""
    @Relationship(deleteRule: .cascade, inverse: \LockerKey.locker) var key: LockerKey?
}

@Entity final class LockerKey: ManagedObject {
    @Relationship var locker: Locker?
}

@Entity final class Album: ManagedObject {
    var title: String = ""
    @Relationship(deleteRule: .noAction, inverse: \Song.albums) var songs: Set<Song>
}

@Entity final class Song: ManagedObject {
    var title: String = ""
    @Relationship(deleteRule: .noAction) var albums: Set<Album>
}

@Entity final class Trader: ManagedObject {
    var name: String = ""
    @Relationship(inverse: \Deal.buyer) var bought: Set<Deal>
    @Relationship(inverse: \Deal.seller) var sold: Set<Deal>
}

@Entity final class Deal: ManagedObject {
    var price: Int = 0
    @Relationship var buyer: Trader?
    @Relationship var seller: Trader?
}

@Entity final class Kennel: ManagedObject {
    var name: String = ""
    @Relationship(deleteRule: .noAction, inverse: \Dog.kennel) var dogs: Set<Dog>
}

@Entity final class Dog: ManagedObject {
    var name: String = ""
    @Relationship var kennel: Kennel?
}

@Entity final class Shelf: ManagedObject {
    var name: String = ""
    @Relationship(deleteRule: .deny, inverse: \Book.shelves) var books: Set<Book>
}

@Entity final class Book: ManagedObject {
    @Relationship var shelves: Set<Shelf>
}

@Entity final class Crate: ManagedObject {
    var name: String = ""
    @Relationship(deleteRule: .cascade, inverse: \Can.crates) var cans: Set<Can>
}

@Entity final class Can: ManagedObject {
    @Relationship var crates: Set<Crate>
}

@Entity final class Poster: ManagedObject {
    var name: String = ""
    @Relationship(inverse: \Wall.posters) var walls: Set<Wall>
}

@Entity final class Wall: ManagedObject {
    @Relationship var posters: Set<Poster>
}

