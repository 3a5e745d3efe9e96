@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

@Entity final class Loner: ManagedObject {
    @Relationship var stranger: Stranger?
}

@Entity final class Stranger: ManagedObject {
    var name: String = ""
}

@Entity final class WrongWay: ManagedObject {
    @Relationship(inverse: \Stranger.name) var target: Stranger?
}

@Entity(name: "Person") final class Impostor: ManagedObject {
    var name: String = ""
}

@Entity final class Mismatched: ManagedObject {
    @Relationship(inverse: \Pet.owner) var pets: Set<Pet>
}

/// Declared by hand, as `@Relationship` cannot (Swift reports a circular reference):
/// `friends` names itself as its inverse.
final class Symmetric: ManagedObject, @unchecked Sendable {
    // @unchecked: as for every entity (what `@Entity` adds): no state of its own, and
    // `ManagedObject`'s is guarded by its context's confinement check.
    nonisolated static let declared = EntityDescription(name: "Symmetric", type: Symmetric.self, superentity: nil,
                                                        properties: [.toMany("friends", Symmetric.self, inverse: "friends")])
    override class var entityDescription: EntityDescription { declared }
}

/// Two entities whose relationships share a name and are each other's inverse: not one
/// relationship that is its own inverse.
@Entity final class Dancer: ManagedObject {
    @Relationship(inverse: \Partner.partner) var partner: Partner?
}

@Entity final class Partner: ManagedObject {
    @Relationship var partner: Dancer?
}

/// Two relationships that name each other's sides wrongly: `Left.a` names `Right.one` as its
/// inverse, and `Right.one` names `Left.b`.
@Entity final class Left: ManagedObject {
    @Relationship(inverse: \Right.one) var a: Right?
    @Relationship var b: Right?
}

@Entity final class Right: ManagedObject {
    @Relationship(inverse: \Left.b) var one: Left?
}

@Entity(unique: [[]]) final class EmptyUnique: ManagedObject {
    var name: String = ""
}

@Suite struct ModelTests {
    /// The codes Docs/GettingStarted.md's table of `ModelError`s gives, each with its cause.
    @Test func eachInconsistencyThrowsItsCode() {
        func code(_ make: () throws -> Model) -> (ModelError.Code, String)? {
            do { _ = try make(); return nil } catch let error as ModelError { return (error.code, error.message) } catch { return nil }
        }
        #expect(code { try Model([]) }?.0 == .emptyModel)
        let unknown = code { try Model(Person.self, Pet.self, configurations: ["Main": [Person.self, Stranger.self]]) }
        #expect(unknown?.0 == .unknownConfiguration)
        #expect(unknown?.1.contains("Configuration 'Main' lists Stranger, which is not in the model") == true)
        let crossed = code { try Model(Left.self, Right.self) }
        #expect(crossed?.0 == .badInverse)
        #expect(crossed?.1.contains("Left.a names the inverse Right.one, but Right.one names b as its inverse") == true, "\(String(describing: crossed))")
        let empty = code { try Model(EmptyUnique.self) }
        #expect(empty?.0 == .invalidUniqueness)
        #expect(empty?.1.contains("lists an empty constraint") == true)
    }

    @Test func relationshipsOfOneNameOnTwoEntitiesMayBeEachOthersInverse() throws {
        let model = try Model(Dancer.self, Partner.self)
        let dancer = try #require(model.graph.entity(named: "Dancer")?.property(named: "partner"))
        let partner = try #require(model.graph.entity(named: "Partner")?.property(named: "partner"))
        #expect(dancer.inverse === partner && partner.inverse === dancer)
    }

    /// A relationship that is its own inverse would be stored as one end of each pair only:
    /// the model refuses it, naming the way to declare it.
    @Test func aRelationshipThatIsItsOwnInverseIsRefused() {
        #expect {
            try Model(Symmetric.self)
        } throws: { error in
            guard let error = error as? ModelError, error.code == .badInverse else { return false }
            return error.message.contains("Symmetric.friends names itself as its inverse")
                && error.message.contains("Declare two relationships, each the other's inverse")
        }
    }

    /// A server that makes a `Model` for every stack (one per tenant) keeps one resolved graph
    /// of it, not one a stack: a graph's entities reference one another and are never freed.
    @Test func modelsOfTheSameEntitiesShareOneResolvedGraph() throws {
        let first = try Model(Dancer.self, Partner.self)
        #expect(try Model(Partner.self, Dancer.self, Dancer.self).graph === first.graph)
        let configured = try Model(Dancer.self, Partner.self, configurations: ["dance": [Dancer.self, Partner.self]])
        #expect(configured.graph !== first.graph)
        #expect(try Model(Dancer.self, Partner.self, configurations: ["dance": [Partner.self, Dancer.self]]).graph === configured.graph)
        #expect(try Model(Dancer.self, Partner.self, configurations: ["other": [Partner.self, Dancer.self]]).graph !== configured.graph)
        #expect(try Model(Stranger.self).graph !== first.graph)
        let stacks = try (0..<3).map { _ in try Stack(model: Model(Dancer.self, Partner.self)) }
        #expect(stacks.allSatisfy { $0.graph === first.graph })
    }

    /// A model made again is the latest for `ObjectID(_:)`'s names, as a new one is, though
    /// its graph was resolved before: after a model whose "Person" is another class, making
    /// the first model again makes "Person/1" its `Person`'s.
    @Test func aModelMadeAgainIsTheLatestForIDsByName() throws {
        _ = try Model(Person.self, Pet.self)
        _ = try Model(Impostor.self)
        #expect(ObjectID("Person/1")?.rootEntity === Impostor.entityDescription)
        _ = try Model(Person.self, Pet.self)
        #expect(ObjectID("Person/1")?.rootEntity === Person.entityDescription)
    }

    /// Threads making one model at once all get the graph the first of them stored.
    @Test func modelsMadeOnManyThreadsAtOnceShareOneGraph() {
        let configuration = ["\(#function)": [Dancer.self, Partner.self] as [ManagedObject.Type]]
        let graphs = Locked<[ObjectIdentifier?]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let graph = try? Model(Dancer.self, Partner.self, configurations: configuration).graph
            graphs.withLock { $0.append(graph.map(ObjectIdentifier.init)) }
        }
        let made = graphs.withLock { $0 }
        #expect(made.count == 8 && !made.contains(nil))
        #expect(Set(made).count == 1)
    }

    /// A sub-entity's parents come along when only it is listed: fetching it reads their table.
    @Test func aModelOfASubEntityHoldsItsParent() throws {
        let model = try Model(Engineer.self, Team.self)
        #expect(model.entityNames.contains("Staff"))
        #expect(model.graph.entity(named: "Engineer")?.superentity === model.graph.entity(named: "Staff"))
    }

    @Test func aValidModelResolvesInversesBothWays() throws {
        let model = try Model(Person.self, Pet.self)
        let person = try #require(model.graph.entity(named: "Person"))
        let pet = try #require(model.graph.entity(named: "Pet"))
        #expect(person.property(named: "friend")?.inverse === person.property(named: "friendOf"))
        #expect(person.property(named: "friendOf")?.inverse === person.property(named: "friend"))
        #expect(person.property(named: "pets")?.inverse === pet.property(named: "owner"))
        #expect(pet.property(named: "owner")?.inverse === person.property(named: "pets"))
        #expect(person.property(named: "pets")?.deleteRule == .cascade)
        #expect(person.property(named: "scratch") == nil)  // @Transient
        #expect(model.entityNames == ["Person", "Pet"])
    }

    @Test func aRelationshipToAnEntityOutsideTheModelThrows() {
        #expect {
            try Model(Loner.self)
        } throws: { error in
            let error = try #require(error as? ModelError)
            return error.code == .unknownDestination && error.message.contains("Loner.stranger") && error.message.contains("Stranger")
        }
        #expect(throws: Never.self) { try Model(Loner.self, Stranger.self) }
    }

    @Test func anInverseThatIsNotARelationshipThrows() {
        #expect {
            try Model(WrongWay.self, Stranger.self)
        } throws: { error in
            (error as? ModelError)?.code == .badInverse
        }
    }

    @Test func anInverseThatDoesNotPointBackThrows() {
        // Mismatched.pets names Pet.owner, which points to Person.
        #expect {
            try Model(Mismatched.self, Pet.self, Person.self)
        } throws: { error in
            let error = try #require(error as? ModelError)
            return error.code == .badInverse && error.message.contains("does not point back")
        }
    }

    @Test func duplicateEntityNamesThrow() {
        #expect {
            try Model(Person.self, Pet.self, Impostor.self)
        } throws: { error in
            (error as? ModelError)?.code == .duplicateEntity
        }
    }

    @Test func anEmptyModelThrows() {
        #expect(throws: ModelError.self) { try Model([]) }
    }

    @Test func theHashFollowsTheSchema() throws {
        let a = try Model(Person.self, Pet.self)
        let b = try Model(Pet.self, Person.self)
        let c = try Model(Loner.self, Stranger.self)
        #expect(a.versionHash == b.versionHash)
        #expect(a.versionHash != c.versionHash)
    }

    @Test func slotsFollowDeclarationOrder() {
        let description = Person.entityDescription
        #expect(description.name == "Person")
        #expect(description.ownProperties.map(\.name) == ["name", "age", "location", "email", "friend", "friendOf", "pets"])
        #expect(description.slotBase == 0)
        #expect(Impostor.entityDescription.name == "Person")
    }
}

@Entity final class Reserved: ManagedObject {
    var Z_PK: Int = 0
}

@Suite struct ModelEdgeTests {
    @Test func propertyNamesStartingWithZUnderscoreAreReserved() {
        #expect {
            try Model(Reserved.self)
        } throws: { error in
            (error as? ModelError)?.code == .reservedName
        }
    }

    @Test func anUnknownConfigurationNameThrows() throws {
        let stack = try Stack(model: Model(Person.self, Pet.self))
        #expect {
            try stack.addInMemoryStore(configuration: "Nope")
        } throws: { error in
            (error as? StoreError)?.code == .unknownConfiguration
        }
    }

    @Test @MainActor func hasChangesFollowsTheObjectsState() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let pet = try update.create(Pet.self)
            #expect(pet.hasChanges && pet.isInserted)
            try update.commit()
            #expect(!pet.hasChanges && !pet.isInserted)
            pet.age = 2
            #expect(pet.hasChanges)
            update.rollback()
            #expect(!pet.hasChanges && pet.age == 0)
            try update.delete(pet)
            #expect(pet.hasChanges && pet.isDeleted)
            try update.commit()
            #expect(!pet.hasChanges && pet.isDeleted, "the delete is committed")
            let never = try update.create(Pet.self)
            try update.delete(never)
            #expect(!never.hasChanges && never.isDeleted, "created and deleted: no commit saves it")
            #expect(try update.fetch(Pet.self, id: never.objectID) == nil)
            // Also when it was put in a relationship first (a many-to-many pair records both ends).
            let article = try update.create(Article.self)
            try update.commit()
            let tag = try update.create(Tag.self)
            article.tags.insert(tag)
            try update.delete(tag)
            #expect(!tag.hasChanges && tag.isDeleted, "created, related and deleted")
            #expect(article.tags.isEmpty)
        }
        #expect(try world.fetch(Pet.self) == nil)
    }

    /// Both ends of a changed relationship have changes, whichever side was set, as in Core
    /// Data: the owner a pet joins and the one it leaves, both sides of a many-to-many pair.
    /// (`Commit` still lists only the objects whose stored values changed: Docs/Topologies.md;
    /// and the owner's row has nothing to save, so it is not a pending object a fetch must
    /// merge.)
    @Test @MainActor func bothEndsOfAChangedRelationshipHaveChanges() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let (ann, bob, rex) = (try update.create(Person.self), try update.create(Person.self), try update.create(Pet.self))
            let (article, tag) = (try update.create(Article.self), try update.create(Tag.self))
            try update.commit()
            #expect(![ann, bob].contains { $0.hasChanges } && !rex.hasChanges)

            rex.owner = ann
            #expect(rex.hasChanges && ann.hasChanges && !bob.hasChanges)
            try update.commit()
            rex.owner = bob
            #expect(rex.hasChanges && ann.hasChanges && bob.hasChanges, "the owner it left and the one it joined")
            try update.commit()
            bob.pets.remove(rex)
            #expect(rex.hasChanges && bob.hasChanges)
            update.rollback()

            tag.articles.insert(article)
            #expect(tag.hasChanges && article.hasChanges)
            try update.commit()
            #expect(!tag.hasChanges && !article.hasChanges)
        }
    }
}
