"""The travel desk's built-in knowledge: cities, their time zones, sights and distances.

Everything here is offline and fixed, so the reference mesh answers the same way every time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["CITIES", "City", "CityName", "Interest", "distance_km"]

CityName = Literal[
    "Lisbon", "London", "Paris", "New York", "Tokyo", "Sydney", "Mexico City", "Cape Town"
]
Interest = Literal["food", "history", "art", "nature", "nightlife"]


@dataclass(frozen=True)
class City:
    name: str
    timezone: str
    latitude: float
    longitude: float
    sights: dict[str, tuple[str, ...]]
    tips: tuple[str, ...]


CITIES: dict[str, City] = {
    "Lisbon": City(
        "Lisbon",
        "Europe/Lisbon",
        38.72,
        -9.14,
        {
            "food": ("Time Out Market", "pastéis de nata in Belém", "a tasca in Alfama"),
            "history": ("Belém Tower", "Jerónimos Monastery", "São Jorge Castle"),
            "art": ("Gulbenkian Museum", "MAAT", "the tile museum"),
            "nature": ("Sintra hills", "Cascais coast", "Monsanto park"),
            "nightlife": ("Bairro Alto", "Pink Street", "LX Factory"),
        },
        ("ride tram 28 early", "buy a Viva Viagem card", "sunset at a miradouro"),
    ),
    "London": City(
        "London",
        "Europe/London",
        51.51,
        -0.13,
        {
            "food": ("Borough Market", "Brick Lane", "a Sunday roast"),
            "history": ("the Tower of London", "Westminster Abbey", "the British Museum"),
            "art": ("Tate Modern", "the National Gallery", "the V&A"),
            "nature": ("Hampstead Heath", "Kew Gardens", "Richmond Park"),
            "nightlife": ("Soho", "Shoreditch", "a West End show"),
        },
        ("tap in with a contactless card", "museums are free", "walk the South Bank"),
    ),
    "Paris": City(
        "Paris",
        "Europe/Paris",
        48.86,
        2.35,
        {
            "food": ("Marché des Enfants Rouges", "a bistro in the 11th", "Rue Cler"),
            "history": ("Notre-Dame", "the Conciergerie", "Les Invalides"),
            "art": ("the Louvre", "Musée d'Orsay", "the Orangerie"),
            "nature": ("Jardin du Luxembourg", "Buttes-Chaumont", "Bois de Vincennes"),
            "nightlife": ("Le Marais", "Canal Saint-Martin", "Pigalle"),
        },
        ("book the Louvre ahead", "picnic by the Seine", "use the Navigo pass"),
    ),
    "New York": City(
        "New York",
        "America/New_York",
        40.71,
        -74.01,
        {
            "food": ("Chelsea Market", "a Katz's pastrami", "Arthur Avenue"),
            "history": ("Ellis Island", "the Tenement Museum", "Federal Hall"),
            "art": ("the Met", "MoMA", "the Whitney"),
            "nature": ("Central Park", "the High Line", "Brooklyn Bridge Park"),
            "nightlife": ("the East Village", "Williamsburg", "a jazz club in the Village"),
        },
        ("walk the Brooklyn Bridge at dawn", "take the Staten Island ferry", "tip 20%"),
    ),
    "Tokyo": City(
        "Tokyo",
        "Asia/Tokyo",
        35.68,
        139.69,
        {
            "food": ("Tsukiji outer market", "a ramen counter", "a depachika food hall"),
            "history": ("Senso-ji", "Meiji Shrine", "the Imperial Palace gardens"),
            "art": ("teamLab", "the Mori Art Museum", "Ueno's museums"),
            "nature": ("Shinjuku Gyoen", "Mount Takao", "Yoyogi Park"),
            "nightlife": ("Golden Gai", "Shibuya", "Roppongi"),
        },
        ("get a Suica card", "carry some cash", "ride the Yamanote line"),
    ),
    "Sydney": City(
        "Sydney",
        "Australia/Sydney",
        -33.87,
        151.21,
        {
            "food": ("the Fish Market", "Chinatown", "a Surry Hills café"),
            "history": ("The Rocks", "Hyde Park Barracks", "Fort Denison"),
            "art": ("the Art Gallery of NSW", "the MCA", "White Rabbit"),
            "nature": ("the Bondi to Coogee walk", "the Blue Mountains", "Manly"),
            "nightlife": ("Newtown", "Darling Harbour", "the Opera House bars"),
        },
        ("take the Manly ferry", "swim between the flags", "tap on with Opal"),
    ),
    "Mexico City": City(
        "Mexico City",
        "America/Mexico_City",
        19.43,
        -99.13,
        {
            "food": ("Mercado de San Juan", "tacos al pastor in Roma", "Mercado de Coyoacán"),
            "history": ("the Zócalo", "Templo Mayor", "Teotihuacan"),
            "art": ("the Frida Kahlo Museum", "Palacio de Bellas Artes", "Museo Soumaya"),
            "nature": ("Chapultepec", "Xochimilco", "Desierto de los Leones"),
            "nightlife": ("Roma Norte", "Condesa", "Plaza Garibaldi"),
        },
        ("drink bottled water", "book Teotihuacan early", "use Metrobús"),
    ),
    "Cape Town": City(
        "Cape Town",
        "Africa/Johannesburg",
        -33.92,
        18.42,
        {
            "food": ("the Old Biscuit Mill", "a braai", "the V&A Food Market"),
            "history": ("Robben Island", "the Castle of Good Hope", "District Six Museum"),
            "art": ("Zeitz MOCAA", "the Norval Foundation", "Bo-Kaap"),
            "nature": ("Table Mountain", "Cape Point", "Kirstenbosch"),
            "nightlife": ("Long Street", "Bree Street", "the Waterfront"),
        },
        ("go up Table Mountain early", "watch the wind forecast", "use e-hailing at night"),
    ),
}


def distance_km(origin: str, destination: str) -> float:
    """Great-circle distance between two catalogue cities, in kilometres."""
    a, b = CITIES[origin], CITIES[destination]
    phi1, phi2 = math.radians(a.latitude), math.radians(b.latitude)
    dphi = phi2 - phi1
    dlambda = math.radians(b.longitude - a.longitude)
    h = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlambda / 2) ** 2
    return 2 * 6371.0 * math.asin(math.sqrt(h))
