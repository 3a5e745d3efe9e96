import ContextStack

/// A person, with their pets. `@Entity` also generates `Person.Snapshot`: the values the API
/// sends and receives.
@Entity final class Person: ManagedObject {
    var name: String = ""
    var age: Int = 0
    var city: String?
    @Attribute(.unique) var email: String?
    @Relationship(deleteRule: .cascade, inverse: \Pet.owner) var pets: Set<Pet>
}

@Entity final class Pet: ManagedObject {
    var name: String = ""
    var species: String = ""
    @Relationship var owner: Person?
}
