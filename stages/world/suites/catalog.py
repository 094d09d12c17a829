"""The synthetic product catalog the e-commerce suites draw from, in the
world's seven languages: departments of sibling categories, product nouns
with the materials they come in, brands (with look-alikes), adjectives,
colors, materials, model codes, selling points, seller spam, and how a
product title is written in each language.

Everything here is a plain table; the helpers at the bottom only render
titles and pick words. Rows of the translated tables are tuples in
``LANGUAGES`` order (one line per concept, so a translation is reviewed
across all seven languages at once).

Thai and Chinese words are kept short: data_filter's n-gram tokens are
single characters in scripts written without spaces, and a 13-gram that
fits inside one catalog word would make every item with that word look
like a copy of an eval prompt (see stages/world/build.py: ItemFactory).
"""
from __future__ import annotations

import random

LANGUAGES = ("en", "zh-TW", "id", "vi", "th", "pt", "ms")


def _by_lang(row: tuple[str, ...]) -> dict[str, str]:
    assert len(row) == len(LANGUAGES), row
    return dict(zip(LANGUAGES, row))


# -- categories ------------------------------------------------------------------
# Siblings share a department: the hard distractors of the category suite.
DEPARTMENTS: dict[str, tuple[str, ...]] = {
    "tech": ("phones", "computers", "audio"),
    "fashion": ("clothing", "shoes", "bags"),
    "home": ("kitchen", "furniture", "garden"),
    "leisure": ("sports", "toys", "books"),
    "care": ("beauty", "health", "baby"),
}
DEPARTMENT_OF = {cat: dep for dep, cats in DEPARTMENTS.items() for cat in cats}

#                 en               zh-TW       id             vi             th                pt             ms
CATEGORIES: dict[str, dict[str, str]] = {k: _by_lang(v) for k, v in {
    "phones": ("Mobile Phones", "手機通訊", "Handphone", "Điện thoại", "มือถือ", "Celulares", "Telefon Bimbit"),
    "computers": ("Computers", "電腦周邊", "Komputer", "Máy tính", "คอมพิวเตอร์", "Informática", "Komputer"),
    "audio": ("Audio", "耳機音響", "Audio", "Âm thanh", "เครื่องเสียง", "Áudio", "Audio"),
    "clothing": ("Clothing", "服飾", "Pakaian", "Quần áo", "เสื้อผ้า", "Roupas", "Pakaian"),
    "shoes": ("Shoes", "鞋類", "Sepatu", "Giày dép", "รองเท้า", "Calçados", "Kasut"),
    "bags": ("Bags", "箱包", "Tas", "Túi xách", "กระเป๋า", "Bolsas", "Beg"),
    "kitchen": ("Kitchen", "廚房用品", "Dapur", "Nhà bếp", "เครื่องครัว", "Cozinha", "Dapur"),
    "furniture": ("Furniture", "家具", "Furnitur", "Nội thất", "เฟอร์นิเจอร์", "Móveis", "Perabot"),
    "garden": ("Garden", "園藝", "Taman", "Làm vườn", "จัดสวน", "Jardim", "Taman"),
    "sports": ("Sports", "運動用品", "Olahraga", "Thể thao", "กีฬา", "Esportes", "Sukan"),
    "toys": ("Toys", "玩具", "Mainan", "Đồ chơi", "ของเล่น", "Brinquedos", "Mainan"),
    "books": ("Books", "書籍", "Buku", "Sách", "หนังสือ", "Livros", "Buku"),
    "beauty": ("Beauty", "美妝", "Kecantikan", "Làm đẹp", "ความงาม", "Beleza", "Kecantikan"),
    "health": ("Health", "保健", "Kesehatan", "Sức khỏe", "สุขภาพ", "Saúde", "Kesihatan"),
    "baby": ("Baby", "母嬰", "Ibu & Bayi", "Mẹ & Bé", "แม่และเด็ก", "Bebês", "Ibu & Bayi"),
}.items()}

# -- materials ---------------------------------------------------------------------
MATERIALS: dict[str, dict[str, str]] = {k: _by_lang(v) for k, v in {
    "cotton": ("Cotton", "純棉", "Katun", "cotton", "ผ้าฝ้าย", "Algodão", "Kapas"),
    "polyester": ("Polyester", "聚酯纖維", "Poliester", "polyester", "โพลีเอสเตอร์", "Poliéster", "Poliester"),
    "wool": ("Wool", "羊毛", "Wol", "len", "ขนแกะ", "Lã", "Bulu Biri-biri"),
    "leather": ("Leather", "皮革", "Kulit", "da", "หนัง", "Couro", "Kulit"),
    "rubber": ("Rubber", "橡膠", "Karet", "cao su", "ยาง", "Borracha", "Getah"),
    "plastic": ("Plastic", "塑膠", "Plastik", "nhựa", "พลาสติก", "Plástico", "Plastik"),
    "silicone": ("Silicone", "矽膠", "Silikon", "silicone", "ซิลิโคน", "Silicone", "Silikon"),
    "glass": ("Glass", "玻璃", "Kaca", "thủy tinh", "แก้ว", "Vidro", "Kaca"),
    "ceramic": ("Ceramic", "陶瓷", "Keramik", "gốm sứ", "เซรามิก", "Cerâmica", "Seramik"),
    "wood": ("Wood", "實木", "Kayu", "gỗ", "ไม้", "Madeira", "Kayu"),
    "steel": ("Stainless Steel", "不鏽鋼", "Baja Tahan Karat", "thép không gỉ", "สแตนเลส", "Aço Inoxidável",
              "Keluli Tahan Karat"),
    "aluminum": ("Aluminum", "鋁合金", "Aluminium", "nhôm", "อะลูมิเนียม", "Alumínio", "Aluminium"),
}.items()}

# -- product nouns -------------------------------------------------------------------
# category -> rows of (materials it comes in, then the noun in LANGUAGES order). A
# noun with no materials (books, cosmetics, consumables) has no color or material
# attribute either: the attribute suites skip it.
_NOUN_ROWS: dict[str, list[tuple[str, ...]]] = {
    "phones": [
        ("aluminum glass plastic", "Smartphone", "智慧型手機", "Smartphone", "Điện thoại thông minh", "สมาร์ทโฟน",
         "Smartphone", "Telefon Pintar"),
        ("silicone plastic leather", "Phone Case", "手機殼", "Casing HP", "Ốp lưng điện thoại", "เคสโทรศัพท์",
         "Capinha de Celular", "Sarung Telefon"),
        ("glass plastic", "Screen Protector", "螢幕保護貼", "Pelindung Layar", "Miếng dán màn hình", "ฟิล์มกันรอย",
         "Película Protetora", "Pelindung Skrin"),
        ("plastic aluminum", "Power Bank", "行動電源", "Power Bank", "Sạc dự phòng", "แบตสำรอง",
         "Carregador Portátil", "Power Bank"),
        ("plastic", "Phone Charger", "手機充電器", "Charger HP", "Củ sạc điện thoại", "หัวชาร์จ",
         "Carregador de Celular", "Pengecas Telefon"),
    ],
    "computers": [
        ("aluminum plastic", "Laptop", "筆記型電腦", "Laptop", "Máy tính xách tay", "โน้ตบุ๊ก", "Notebook",
         "Komputer Riba"),
        ("plastic aluminum", "Mechanical Keyboard", "機械式鍵盤", "Keyboard Mekanik", "Bàn phím cơ",
         "คีย์บอร์ด", "Teclado Mecânico", "Papan Kekunci Mekanikal"),
        ("plastic", "Wireless Mouse", "無線滑鼠", "Mouse Nirkabel", "Chuột không dây", "เมาส์ไร้สาย", "Mouse sem Fio",
         "Tetikus Tanpa Wayar"),
        ("plastic aluminum", "Gaming Monitor", "電競螢幕", "Monitor Gaming", "Màn hình gaming", "จอเกมมิ่ง",
         "Monitor Gamer", "Monitor Gaming"),
        ("plastic aluminum", "USB Flash Drive", "USB隨身碟", "Flashdisk", "Ổ USB", "แฟลชไดรฟ์", "Pen Drive",
         "Pemacu Kilat USB"),
    ],
    "audio": [
        ("plastic silicone", "Wireless Earbuds", "真無線耳機", "Earphone Nirkabel", "Tai nghe không dây", "หูฟังไร้สาย",
         "Fone de Ouvido sem Fio", "Fon Telinga Tanpa Wayar"),
        ("plastic aluminum rubber", "Bluetooth Speaker", "藍牙喇叭", "Speaker Bluetooth", "Loa Bluetooth",
         "ลำโพงบลูทูธ", "Caixa de Som Bluetooth", "Pembesar Suara Bluetooth"),
        ("plastic leather aluminum", "Over-Ear Headphones", "頭戴式耳機", "Headphone", "Tai nghe chụp tai",
         "หูฟังครอบหู", "Headphone", "Fon Kepala"),
        ("plastic aluminum wood", "Soundbar", "聲霸", "Soundbar", "Loa thanh", "ซาวด์บาร์", "Soundbar", "Soundbar"),
        ("aluminum plastic", "Microphone", "麥克風", "Mikrofon", "Micro thu âm", "ไมโครโฟน", "Microfone", "Mikrofon"),
    ],
    "clothing": [
        ("cotton polyester leather", "Casual Jacket", "休閒外套", "Jaket Kasual", "Áo khoác", "แจ็คเก็ต",
         "Jaqueta Casual", "Jaket Kasual"),
        ("cotton polyester", "Hoodie", "連帽上衣", "Hoodie", "Áo hoodie", "เสื้อฮู้ด", "Moletom com Capuz", "Baju Hoodie"),
        ("cotton polyester", "T-Shirt", "T恤", "Kaos", "Áo thun", "เสื้อยืด", "Camiseta", "Baju T"),
        ("wool cotton", "Knit Sweater", "針織毛衣", "Sweater Rajut", "Áo len", "เสื้อไหมพรม", "Suéter de Tricô",
         "Sweater Kait"),
        ("cotton polyester", "Maxi Dress", "長洋裝", "Gaun Panjang", "Đầm maxi", "เดรสยาว", "Vestido Longo",
         "Gaun Labuh"),
    ],
    "shoes": [
        ("leather rubber", "Ankle Boots", "短靴", "Sepatu Bot", "Giày bốt cổ ngắn", "บูทหุ้มข้อ",
         "Bota Cano Curto", "But Buku Lali"),
        ("leather rubber plastic", "Sandals", "涼鞋", "Sandal", "Giày sandal", "แซนดัล", "Sandália", "Sandal"),
        ("rubber cotton", "Slippers", "室內拖鞋", "Sandal Rumah", "Dép đi trong nhà", "สลิปเปอร์", "Chinelo",
         "Selipar"),
        ("leather", "High Heels", "高跟鞋", "Sepatu Hak Tinggi", "Giày cao gót", "ส้นสูง",
         "Sapato de Salto Alto", "Kasut Tumit Tinggi"),
        ("cotton leather polyester", "Sneakers", "休閒鞋", "Sepatu Sneakers", "Giày sneaker", "รองเท้าผ้าใบ",
         "Tênis Casual", "Kasut Sneakers"),
    ],
    "bags": [
        ("polyester leather cotton", "Backpack", "後背包", "Tas Ransel", "Ba lô", "กระเป๋าเป้", "Mochila", "Beg Galas"),
        ("leather polyester", "Handbag", "手提包", "Tas Tangan", "Túi xách tay", "กระเป๋าถือ", "Bolsa de Mão",
         "Beg Tangan"),
        ("leather", "Wallet", "皮夾", "Dompet", "Ví tiền", "กระเป๋าเงิน", "Carteira", "Dompet"),
        ("plastic aluminum polyester", "Suitcase", "行李箱", "Koper", "Vali", "กระเป๋าลาก", "Mala de Viagem",
         "Beg Bagasi"),
        ("cotton polyester", "Tote Bag", "托特包", "Tas Tote", "Túi tote", "กระเป๋าโท้ท", "Bolsa Tote", "Beg Tote"),
    ],
    "kitchen": [
        ("plastic glass steel", "Blender", "果汁機", "Blender", "Máy xay sinh tố", "เครื่องปั่น",
         "Liquidificador", "Pengisar"),
        ("steel aluminum ceramic", "Nonstick Frying Pan", "不沾平底鍋", "Wajan Antilengket", "Chảo chống dính",
         "กระทะกันติด", "Frigideira Antiaderente", "Kuali Tidak Melekat"),
        ("steel glass plastic", "Electric Kettle", "電熱水壺", "Teko Listrik", "Ấm siêu tốc", "กาต้มน้ำ",
         "Chaleira Elétrica", "Cerek Elektrik"),
        ("steel plastic", "Rice Cooker", "電子鍋", "Penanak Nasi", "Nồi cơm điện", "หม้อหุงข้าว",
         "Panela de Arroz Elétrica", "Periuk Nasi Elektrik"),
        ("steel ceramic", "Knife Set", "刀具組", "Set Pisau", "Bộ dao nhà bếp", "ชุดมีด", "Jogo de Facas",
         "Set Pisau"),
    ],
    "furniture": [
        ("plastic leather polyester", "Gaming Chair", "電競椅", "Kursi Gaming", "Ghế gaming", "เก้าอี้เกม",
         "Cadeira Gamer", "Kerusi Gaming"),
        ("wood steel", "Bookshelf", "書架", "Rak Buku", "Kệ sách", "ชั้นหนังสือ", "Estante de Livros", "Rak Buku"),
        ("wood glass steel", "Coffee Table", "茶几", "Meja Tamu", "Bàn trà", "โต๊ะกลาง", "Mesa de Centro", "Meja Kopi"),
        ("leather cotton polyester", "Sofa", "沙發", "Sofa", "Ghế sofa", "โซฟา", "Sofá", "Sofa"),
        ("wood", "Bedside Table", "床頭櫃", "Nakas", "Tủ đầu giường", "ตู้ข้างเตียง", "Criado-Mudo", "Meja Sisi Katil"),
    ],
    "garden": [
        ("rubber plastic", "Garden Hose", "園藝水管", "Selang Taman", "Vòi tưới cây", "สายยางรดน้ำ",
         "Mangueira de Jardim", "Hos Taman"),
        ("ceramic plastic", "Flower Pot", "花盆", "Pot Bunga", "Chậu hoa", "กระถางต้นไม้", "Vaso de Planta",
         "Pasu Bunga"),
        ("steel plastic", "Lawn Mower", "割草機", "Mesin Pemotong Rumput", "Máy cắt cỏ", "รถตัดหญ้า",
         "Cortador de Grama", "Mesin Pemotong Rumput"),
        ("steel", "Pruning Shears", "修枝剪", "Gunting Dahan", "Kéo cắt cành", "กรรไกรสวน", "Tesoura de Poda",
         "Gunting Dahan"),
        ("plastic steel", "Watering Can", "澆水壺", "Penyiram Tanaman", "Bình tưới cây", "บัวรดน้ำ", "Regador",
         "Penyiram Pokok"),
    ],
    "sports": [
        ("rubber", "Yoga Mat", "瑜珈墊", "Matras Yoga", "Thảm tập yoga", "เสื่อโยคะ", "Tapete de Yoga", "Tikar Yoga"),
        ("steel rubber", "Dumbbell Set", "啞鈴組", "Set Dumbel", "Bộ tạ tay", "ชุดดัมเบล", "Kit de Halteres",
         "Set Dumbbell"),
        ("aluminum", "Badminton Racket", "羽球拍", "Raket Bulu Tangkis", "Vợt cầu lông", "ไม้แบดมินตัน",
         "Raquete de Badminton", "Raket Badminton"),
        ("rubber leather", "Football", "足球", "Bola Sepak", "Quả bóng đá", "ลูกฟุตบอล", "Bola de Futebol", "Bola Sepak"),
        ("plastic steel rubber", "Jump Rope", "跳繩", "Tali Skipping", "Dây nhảy", "เชือกกระโดด", "Corda de Pular",
         "Tali Lompat"),
    ],
    "toys": [
        ("wood", "Jigsaw Puzzle", "拼圖", "Puzzle Jigsaw", "Tranh ghép hình", "จิ๊กซอว์", "Quebra-Cabeça",
         "Teka-teki Jigsaw"),
        ("plastic wood", "Building Blocks", "積木", "Balok Susun", "Bộ xếp hình", "ตัวต่อ", "Kit de Blocos de Montar",
         "Blok Binaan"),
        ("cotton polyester", "Teddy Bear", "泰迪熊", "Boneka Beruang", "Gấu bông", "ตุ๊กตาหมี", "Urso de Pelúcia",
         "Anak Patung Beruang"),
        ("plastic steel", "Toy Car", "玩具車", "Mobil Mainan", "Xe đồ chơi", "รถของเล่น", "Carrinho de Brinquedo",
         "Kereta Mainan"),
        ("plastic", "Doll", "洋娃娃", "Boneka", "Búp bê", "ตุ๊กตา", "Boneca", "Anak Patung"),
    ],
    "books": [
        ("", "Mystery Novel", "推理小說", "Novel Misteri", "Tiểu thuyết trinh thám", "นิยายสืบสวน", "Romance Policial",
         "Novel Misteri"),
        ("", "Cookbook", "食譜書", "Buku Resep", "Sách dạy nấu ăn", "ตำราอาหาร", "Livro de Receitas",
         "Buku Resipi"),
        ("", "Dictionary", "辭典", "Kamus", "Từ điển", "พจนานุกรม", "Dicionário", "Kamus"),
        ("", "Comic Book", "漫畫書", "Buku Komik", "Truyện tranh", "การ์ตูน", "História em Quadrinhos",
         "Buku Komik"),
        ("", "Picture Book", "兒童繪本", "Buku Cerita Anak", "Sách tranh thiếu nhi", "นิทานภาพ",
         "Livro Infantil Ilustrado", "Buku Cerita Kanak-kanak"),
    ],
    "beauty": [
        ("", "Lipstick", "口紅", "Lipstik", "Son môi", "ลิปสติก", "Batom", "Gincu"),
        ("", "Nail Polish", "指甲油", "Kutek", "Sơn móng tay", "ยาทาเล็บ", "Esmalte", "Cat Kuku"),
        ("", "Eyeliner", "眼線筆", "Eyeliner", "Bút kẻ mắt", "อายไลเนอร์", "Delineador", "Celak Mata"),
        ("wood plastic", "Makeup Brush Set", "化妝刷具組", "Set Kuas Makeup", "Bộ cọ trang điểm", "แปรงแต่งหน้า",
         "Kit de Pincéis de Maquiagem", "Set Berus Solek"),
        ("plastic", "Hair Dryer", "吹風機", "Pengering Rambut", "Máy sấy tóc", "ไดร์เป่าผม", "Secador de Cabelo",
         "Pengering Rambut"),
    ],
    "health": [
        ("", "Vitamin Supplement", "維他命", "Suplemen Vitamin", "Viên uống vitamin", "วิตามินรวม",
         "Suplemento Vitamínico", "Suplemen Vitamin"),
        ("plastic", "Digital Thermometer", "電子體溫計", "Termometer Digital", "Nhiệt kế điện tử", "ที่วัดไข้",
         "Termômetro Digital", "Termometer Digital"),
        ("plastic polyester", "First Aid Kit", "急救包", "Kotak P3K", "Bộ sơ cứu", "ชุดปฐมพยาบาล",
         "Kit de Primeiros Socorros", "Kit Pertolongan Cemas"),
        ("plastic", "Pill Organizer", "藥盒", "Kotak Obat", "Hộp đựng thuốc", "ตลับยา", "Porta-Comprimidos",
         "Kotak Ubat"),
        ("", "Surgical Mask", "醫療口罩", "Masker Medis", "Khẩu trang y tế", "ผ้าปิดจมูก", "Máscara Cirúrgica",
         "Pelitup Muka Perubatan"),
    ],
    "baby": [
        ("", "Diapers", "紙尿褲", "Popok Bayi", "Tã giấy", "ผ้าอ้อม", "Fralda Descartável", "Lampin Pakai Buang"),
        ("plastic glass silicone", "Baby Bottle", "奶瓶", "Botol Susu Bayi", "Bình sữa", "ขวดนม", "Mamadeira",
         "Botol Susu Bayi"),
        ("aluminum steel", "Stroller", "嬰兒推車", "Kereta Dorong Bayi", "Xe đẩy em bé", "รถเข็นเด็ก", "Carrinho de Bebê",
         "Kereta Sorong Bayi"),
        ("silicone rubber", "Pacifier", "奶嘴", "Empeng", "Núm ti giả", "จุกนมหลอก", "Chupeta", "Puting Bayi"),
        ("", "Baby Wipes", "嬰兒濕紙巾", "Tisu Basah Bayi", "Khăn ướt em bé", "ทิชชู่เปียก", "Lenço Umedecido",
         "Tisu Basah Bayi"),
    ],
}
NOUNS: dict[str, dict[str, list[str]]] = {
    cat: {lang: [row[1 + i] for row in rows] for i, lang in enumerate(LANGUAGES)} for cat, rows in _NOUN_ROWS.items()}
NOUN_MATERIALS: dict[str, list[tuple[str, ...]]] = {
    cat: [tuple(row[0].split()) for row in rows] for cat, rows in _NOUN_ROWS.items()}
# Portuguese nouns a color agrees with in the feminine ("Mochila Preta").
PT_FEMININE = {
    "Capinha de Celular", "Película Protetora", "Caixa de Som Bluetooth", "Jaqueta Casual", "Camiseta",
    "Bota Cano Curto", "Sandália", "Mochila", "Bolsa de Mão", "Carteira", "Mala de Viagem", "Bolsa Tote",
    "Frigideira Antiaderente", "Chaleira Elétrica", "Panela de Arroz Elétrica", "Cadeira Gamer",
    "Estante de Livros", "Mesa de Centro", "Mangueira de Jardim", "Tesoura de Poda", "Corda de Pular",
    "Raquete de Badminton", "Bola de Futebol", "Boneca", "Mamadeira", "Chupeta"}

# -- colors ------------------------------------------------------------------------------
# Portuguese "masculine|feminine" where the two differ; the masculine is the color's name
# ("Cor: Preto"). Thai and Vietnamese name the bare color; titles add "สี" / "màu".
COLORS: dict[str, dict[str, str]] = {k: _by_lang(v) for k, v in {
    "black": ("Black", "黑色", "Hitam", "đen", "ดำ", "Preto|Preta", "Hitam"),
    "white": ("White", "白色", "Putih", "trắng", "ขาว", "Branco|Branca", "Putih"),
    "red": ("Red", "紅色", "Merah", "đỏ", "แดง", "Vermelho|Vermelha", "Merah"),
    "blue": ("Blue", "藍色", "Biru", "xanh dương", "น้ำเงิน", "Azul", "Biru"),
    "green": ("Green", "綠色", "Hijau", "xanh lá", "เขียว", "Verde", "Hijau"),
    "gray": ("Gray", "灰色", "Abu-abu", "xám", "เทา", "Cinza", "Kelabu"),
    "yellow": ("Yellow", "黃色", "Kuning", "vàng", "เหลือง", "Amarelo|Amarela", "Kuning"),
    "purple": ("Purple", "紫色", "Ungu", "tím", "ม่วง", "Roxo|Roxa", "Ungu"),
}.items()}

# -- words around the noun ---------------------------------------------------------------
# Portuguese adjectives are the gender-invariant ones, so they fit every noun.
ADJECTIVES: dict[str, list[str]] = {
    "en": ["Premium", "Compact", "Classic", "Deluxe", "Portable", "Lightweight", "Original", "Modern"],
    "zh-TW": ["高級", "輕巧", "經典", "豪華", "便攜式", "輕量", "正品", "時尚"],
    "id": ["Premium", "Ringkas", "Klasik", "Mewah", "Portabel", "Ringan", "Original", "Modern"],
    "vi": ["Cao cấp", "Nhỏ gọn", "Cổ điển", "Sang trọng", "Tiện lợi", "Siêu nhẹ", "Chính hãng", "Hiện đại"],
    "th": ["พรีเมียม", "กะทัดรัด", "คลาสสิก", "หรูหรา", "พกพาสะดวก", "เบาพิเศษ", "ของแท้", "ทันสมัย"],
    "pt": ["Premium", "Original", "Portátil", "Leve", "Luxo", "Profissional", "Essencial", "Versátil"],
    "ms": ["Premium", "Kompak", "Klasik", "Mewah", "Mudah Alih", "Ringan", "Tulen", "Moden"],
}
# Synthetic brands, each with a look-alike (the hard distractor of the brand suite). No
# brand is part of another brand or of any catalog word (tests/stages/world/test_ecommerce.py).
BRAND_PAIRS = [("Lumio", "Lumeo"), ("Zenta", "Zanta"), ("Orvix", "Orvex"), ("Kairo", "Kaero"),
               ("Nimbo", "Nimba"), ("Vexa", "Vexi"), ("Tundra", "Tondra"), ("Aster", "Astor"),
               ("Picco", "Pacco"), ("Halvo", "Helvo"), ("Rivo", "Ravo"), ("Solan", "Solen")]
BRANDS = [b for pair in BRAND_PAIRS for b in pair]
LOOKALIKE = {a: b for pair in BRAND_PAIRS for a, b in (pair, pair[::-1])}
MODELS = ["X2", "Pro", "Lite", "300", "Air", "Go", "2024", "S7", "Plus", "Neo", "A5", "M3"]

# Short selling points a description may add (no brand, no spam, no shouting).
SELLING_POINTS: dict[str, list[str]] = {
    "en": ["1-year warranty", "Great gift idea", "Easy to use", "Durable build", "Ships within 24 hours",
           "Official store"],
    "zh-TW": ["保固一年", "送禮首選", "操作簡單", "耐用設計", "24小時內出貨", "官方旗艦店"],
    "id": ["Garansi 1 tahun", "Cocok untuk hadiah", "Mudah digunakan", "Awet dan tahan lama", "Dikirim dalam 24 jam",
           "Toko resmi"],
    "vi": ["Bảo hành 1 năm", "Quà tặng ý nghĩa", "Dễ sử dụng", "Bền bỉ", "Giao trong 24 giờ", "Cửa hàng uy tín"],
    "th": ["รับประกัน 1 ปี", "ของขวัญถูกใจ", "ใช้งานง่าย", "แข็งแรงทนทาน", "ส่งไวใน 24 ชม.",
           "ร้านทางการ"],
    "pt": ["Garantia de 1 ano", "Ótimo para presente", "Fácil de usar", "Muito resistente", "Envio em até 24 horas",
           "Loja oficial"],
    "ms": ["Waranti 1 tahun", "Sesuai untuk hadiah", "Mudah digunakan", "Tahan lama", "Dihantar dalam 24 jam",
           "Kedai rasmi"],
}
# "Compatible with X" (tech) / "Similar style to X" (the rest): a second brand in the
# text that is not the product's brand (always last, so the phrase ends in a varied word).
OTHER_BRAND_PHRASES: dict[str, tuple[str, str]] = {
    "en": ("Compatible with {x}", "Similar style to {x}"),
    "zh-TW": ("適用於 {x}", "款式近似 {x}"),
    "id": ("Kompatibel dengan {x}", "Gaya mirip {x}"),
    "vi": ("Tương thích với {x}", "Kiểu dáng giống {x}"),
    "th": ("ใช้กับ {x}", "คล้าย {x}"),
    "pt": ("Compatível com {x}", "Estilo parecido com {x}"),
    "ms": ("Serasi dengan {x}", "Gaya seperti {x}"),
}
# Seller spam that a clean title drops (title_rewrite); never part of a catalog word.
PROMO_PHRASES: dict[str, list[str]] = {
    "en": ["HOT SALE", "FREE SHIPPING", "BEST SELLER", "LIMITED OFFER", "READY STOCK", "CHEAPEST"],
    "zh-TW": ["熱銷", "免運", "現貨", "限時特價", "爆款", "新品上市"],
    "id": ["PROMO", "MURAH", "READY STOCK", "GRATIS ONGKIR", "TERLARIS", "BISA COD"],
    "vi": ["GIÁ RẺ", "FREESHIP", "HÀNG CÓ SẴN", "SALE SỐC", "BÁN CHẠY", "HOT"],
    "th": ["ลดราคา", "ส่งฟรี", "พร้อมส่ง", "ขายดี", "ถูกที่สุด", "โปรโมชั่น"],
    "pt": ["PROMOÇÃO", "FRETE GRÁTIS", "ENVIO IMEDIATO", "MAIS VENDIDO", "OFERTA", "BARATO"],
    "ms": ["MURAH", "PENGHANTARAN PERCUMA", "STOK SEDIA ADA", "TERLARIS", "PROMOSI", "BOLEH COD"],
}

# -- titles ------------------------------------------------------------------------------
# Word order of a listing title per language; empty slots vanish. Chinese glues the
# adjective to the noun; Vietnamese and Portuguese lead with the noun. Thai puts the
# (Latin) brand first and the model last: with one n-gram token per Thai character,
# those two single tokens are what makes a Thai title's 13-grams differ.
TITLE_ORDER = {
    "en": "{brand} {adj} {noun} {model} {color}",
    "zh-TW": "{brand} {adj}{noun} {model} {color}",
    "id": "{brand} {noun} {adj} {model} {color}",
    "vi": "{noun} {brand} {model} {adj} {color}",
    "th": "{brand} {noun} {adj} {color} {model}",
    "pt": "{noun} {brand} {model} {adj} {color}",
    "ms": "{brand} {noun} {adj} {model} {color}",
}
COLOR_IN_TITLE = {"vi": "màu {c}", "th": "สี{c}"}   # other languages write the color alone


def departments_except(cat: str) -> list[str]:
    return [c for dep, cats in DEPARTMENTS.items() if dep != DEPARTMENT_OF[cat] for c in cats]


def siblings(cat: str) -> list[str]:
    return [c for c in DEPARTMENTS[DEPARTMENT_OF[cat]] if c != cat]


def color_name(color: str, lang: str) -> str:
    """The color's name, as an attribute value: ``Preto``, ``đen``, ``Black``."""
    return COLORS[color][lang].split("|")[0]


def color_for(color: str, lang: str, noun: str) -> str:
    """The color as it qualifies ``noun`` (Portuguese agrees in gender)."""
    forms = COLORS[color][lang].split("|")
    return forms[-1] if lang == "pt" and noun in PT_FEMININE else forms[0]


def color_in_title(color: str, lang: str, noun: str) -> str:
    return COLOR_IN_TITLE.get(lang, "{c}").format(c=color_for(color, lang, noun))


def render_title(lang: str, brand: str = "", noun: str = "", adj: str = "", model: str = "",
                 color: str | None = None) -> str:
    """A listing title in the language's word order; ``color`` is a COLORS key."""
    col = color_in_title(color, lang, noun) if color else ""
    text = TITLE_ORDER[lang].format(brand=brand, adj=adj, noun=noun, model=model, color=col)
    return " ".join(text.split())


def sentences(lang: str, parts: list[str]) -> str:
    """Sentences joined with the language's punctuation (Thai separates by spaces)."""
    parts = [p for p in parts if p]
    if lang == "zh-TW":
        return "".join(p + "。" for p in parts)
    if lang == "th":
        return " ".join(parts)
    return " ".join(p + "." for p in parts)


def words(text: str) -> set[str]:
    return {w.casefold() for w in text.split()}


def pick_adjective(rng: random.Random, lang: str, noun: str) -> str:
    """An adjective that repeats no word of the noun (no "Portable Portable Charger")."""
    return rng.choice([a for a in ADJECTIVES[lang] if not words(a) & words(noun) and a not in noun])


def has_attributes(cat: str, idx: int) -> bool:
    """Whether the noun has color and material attributes."""
    return bool(NOUN_MATERIALS[cat][idx])


def draw_noun(rng: random.Random, cats: list[str] | None = None, with_attributes: bool = False) -> tuple[str, int]:
    """A (category, noun index) pair, from ``cats`` (default all)."""
    pool = [(c, i) for c in (cats or sorted(NOUNS)) for i in range(len(NOUN_MATERIALS[c]))
            if not with_attributes or has_attributes(c, i)]
    return rng.choice(pool)
