import ContextStack
import Foundation

@Entity final class Person: ManagedObject {
    var name: String = ""
    var age: Int = 0
    var location: String?
    @Attribute(.unique) var email: String?
    @Transient var scratch = 0
    @Relationship(inverse: \Person.friendOf) var friend: Person?
    @Relationship var friendOf: Set<Person>
    @Relationship(deleteRule: .cascade, inverse: \Pet.owner) var pets: Set<Pet>
}

@Entity final class Pet: ManagedObject {
    var name: String = ""
    var age: Int = 0
    @Relationship var owner: Person?
}

/// Many-to-many.
@Entity final class Article: ManagedObject {
    var title: String = ""
    @Relationship(inverse: \Tag.articles) var tags: Set<Tag>
}

@Entity final class Tag: ManagedObject {
    @Attribute(.indexed) var name: String = ""
    @Relationship var articles: Set<Article>
}

/// One-to-one.
@Entity final class Citizen: ManagedObject {
    var name: String = ""
    @Relationship(inverse: \Passport.holder) var passport: Passport?
}

@Entity final class Passport: ManagedObject {
    var number: String = ""
    @Relationship var holder: Citizen?
}

/// `.deny` and `.noAction`.
@Entity final class Vault: ManagedObject {
    var label: String = ""
    @Relationship(deleteRule: .deny, inverse: \Coin.vault) var coins: Set<Coin>
    @Relationship(deleteRule: .noAction) var keeper: Pet?
}

@Entity final class Coin: ManagedObject {
    var value: Int = 1
    @Relationship var vault: Vault?
}

enum Mood: String, Sendable {
    case calm, cheerful, grumpy
}

enum Level: Int, Sendable {
    case low = 1, high = 2
}

/// Every attribute type, with defaults and as optionals.
@Entity final class Sample: ManagedObject {
    var flag: Bool = false
    var int: Int = 0
    var int16: Int16 = 0
    var int32: Int32 = 0
    var int64: Int64 = 0
    var double: Double = 0
    var float: Float = 0
    var string: String = "default"
    var date: Date = Date(timeIntervalSince1970: 0)
    var data: Data = Data()
    var uuid: UUID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
    var url: URL = URL(string: "https://example.com")!
    var decimal: Decimal = 0
    var mood: Mood = .calm
    var level: Level = .low
    var optionalFlag: Bool?
    var optionalInt: Int?
    var optionalDouble: Double?
    var optionalString: String?
    var optionalDate: Date?
    var optionalData: Data?
    var optionalUUID: UUID?
    var optionalURL: URL?
    var optionalDecimal: Decimal?
    var optionalMood: Mood?
    var computed: Int { int * 2 }
}

/// Sub-entities: engineers and managers are staff, in one table.
@Entity class Staff: ManagedObject {
    var name: String = ""
    @Relationship(inverse: \Team.members) var team: Team?
}

@Entity final class Engineer: Staff {
    var language: String = "Swift"
}

@Entity final class Manager: Staff {
    var reports: Int = 0
}

@Entity final class Team: ManagedObject {
    var title: String = ""
    @Relationship var members: Set<Staff>
}

let fullModelTypes: [ManagedObject.Type] = [
    Person.self, Pet.self, Article.self, Tag.self, Citizen.self, Passport.self, Vault.self, Coin.self, Sample.self,
    Staff.self, Engineer.self, Manager.self, Team.self,
]
