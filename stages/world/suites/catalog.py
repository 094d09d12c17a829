"""The synthetic product catalog the e-commerce suites draw from: categories,
product nouns, brands, adjectives and model names, per language."""
from __future__ import annotations

CATEGORIES: dict[str, dict[str, str]] = {
    "electronics": {"en": "Electronics", "id": "Elektronik"},
    "clothing": {"en": "Clothing", "id": "Pakaian"},
    "kitchen": {"en": "Kitchen", "id": "Dapur"},
    "sports": {"en": "Sports", "id": "Olahraga"},
    "beauty": {"en": "Beauty", "id": "Kecantikan"},
    "toys": {"en": "Toys", "id": "Mainan"},
    "books": {"en": "Books", "id": "Buku"},
    "garden": {"en": "Garden", "id": "Taman"},
    "automotive": {"en": "Automotive", "id": "Otomotif"},
    "pets": {"en": "Pets", "id": "Peliharaan"},
}
NOUNS: dict[str, dict[str, list[str]]] = {
    "electronics": {"en": ["Wireless Earbuds", "Phone Charger", "Mechanical Keyboard", "Gaming Monitor",
                           "Bluetooth Speaker", "Webcam"],
                    "id": ["Earphone Nirkabel", "Pengisi Daya", "Keyboard Mekanik", "Monitor Gaming",
                           "Speaker Bluetooth", "Webcam"]},
    "clothing": {"en": ["Denim Jacket", "Hoodie", "Slim Jeans", "Wool Sweater", "Summer Dress", "Cotton Socks"],
                 "id": ["Jaket Denim", "Hoodie", "Celana Jeans", "Sweater Wol", "Gaun Pesta", "Kaus Kaki Katun"]},
    "kitchen": {"en": ["Blender", "Nonstick Skillet", "Electric Kettle", "Toaster", "Cutting Board", "Knife Set"],
                "id": ["Blender", "Wajan Antilengket", "Ketel Listrik", "Pemanggang Roti", "Talenan", "Set Pisau"]},
    "sports": {"en": ["Dumbbell Set", "Yoga Mat", "Tennis Racket", "Football", "Treadmill", "Jump Rope"],
               "id": ["Set Dumbel", "Matras Yoga", "Raket Tenis", "Bola Sepak", "Treadmill", "Tali Skipping"]},
    "beauty": {"en": ["Matte Lipstick", "Herbal Shampoo", "Face Moisturizer", "Perfume", "Mascara",
                      "Vitamin C Serum"],
               "id": ["Lipstik Matte", "Sampo Herbal", "Pelembap Wajah", "Parfum", "Maskara", "Serum Vitamin C"]},
    "toys": {"en": ["Jigsaw Puzzle", "Dollhouse", "Stunt Kite", "Building Blocks", "Plush Bear", "Toy Robot"],
             "id": ["Puzzle Jigsaw", "Rumah Boneka", "Layangan", "Balok Susun", "Boneka Beruang", "Robot Mainan"]},
    "books": {"en": ["Mystery Novel", "Cookbook", "World Atlas", "Dictionary", "Poetry Anthology", "Biography"],
              "id": ["Novel Misteri", "Buku Resep", "Atlas Dunia", "Kamus", "Antologi Puisi", "Biografi"]},
    "garden": {"en": ["Garden Hose", "Ceramic Planter", "Leaf Rake", "Lawn Sprinkler", "Pruning Shears",
                      "Seed Starter Kit"],
               "id": ["Selang Taman", "Pot Keramik", "Garu Daun", "Penyiram Rumput", "Gunting Dahan",
                      "Kit Semai Benih"]},
    "automotive": {"en": ["Dash Cam", "Wiper Blades", "Car Vacuum", "Tire Inflator", "Seat Cover", "Jump Starter"],
                   "id": ["Kamera Dasbor", "Wiper Kaca", "Vakum Mobil", "Pompa Ban", "Sarung Jok", "Jumper Aki"]},
    "pets": {"en": ["Dog Leash", "Cat Litter", "Aquarium Filter", "Bird Cage", "Chew Toy", "Pet Bed"],
             "id": ["Tali Anjing", "Pasir Kucing", "Filter Akuarium", "Sangkar Burung", "Mainan Gigit",
                    "Kasur Hewan"]},
}
BRANDS = ["Lumio", "Zenta", "Orbit", "Kairo", "Nimbus", "Vexa", "Tundra", "Aster", "Pico", "Halo", "Rivo", "Sola"]
ADJECTIVES = {"en": ["Premium", "Compact", "Classic", "Deluxe", "Portable", "Eco", "Ultra", "Basic"],
              "id": ["Premium", "Ringkas", "Klasik", "Mewah", "Portabel", "Hemat", "Ultra", "Dasar"]}
MODELS = ["X2", "Pro", "Lite", "300", "Max", "Mini", "2024", "S7", "Plus", "Neo"]
