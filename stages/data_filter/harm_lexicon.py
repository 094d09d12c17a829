"""The rules of the default harmful-content filter: en, zh-TW, id, vi, th, pt, ms.

Categories: ``weapons`` (making explosives, weapons of mass harm, untraceable guns),
``self_harm`` (methods sought, or encouragement), ``csam`` (sexual content involving
minors), ``malware`` (writing it), ``drugs`` (making hard drugs), ``terrorism`` (joining
a terrorist group, planning an attack).

A rule fires on an *intent next to an object* ("make ... pipe bomb"), never on a word
alone, so "kill the process", "shoot a photo", "a bomb of a sale", "drug store" or a
cake that "explodes with flavor" do not fire; its ``unless`` pattern, searched near the
match, vetoes benign readings ("bath bomb", "bom tấn" = blockbuster, "bomba d'água" =
water pump, reporting, prevention, history, treatment). Texts are normalized first
(NFKC, lower case). Rules are ordered by category; the first match wins.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    name: str                      # language.category.kind
    category: str
    pattern: re.Pattern
    anchor: str                    # RE2 regex every match contains (the batch prefilter)
    unless: re.Pattern | None = None


def near(acts: str, objects: str, gap: int = 4) -> str:
    """Spaced scripts: an act word, at most ``gap`` words, then an object."""
    return rf"\b(?:{acts})\b(?:\W+[\w'’-]+){{0,{gap}}}?\W+(?:{objects})\b"


def near_chars(acts: str, objects: str, gap: int = 8) -> str:
    """Unspaced scripts (Chinese, Thai): an act, at most ``gap`` characters, then an object."""
    return rf"(?:{acts}).{{0,{gap}}}?(?:{objects})"


def either(*patterns: str) -> str:
    return "|".join(f"(?:{p})" for p in patterns)


def words(pattern: str) -> str:
    return rf"\b(?:{pattern})\b"


_RULES: list[Rule] = []


def _nfkc(pattern: str) -> str:
    # Texts are NFKC-normalized, so patterns must be too (Thai SARA AM, for one, decomposes).
    return unicodedata.normalize("NFKC", pattern)


def rule(name: str, pattern: str, anchor: str, unless: str | None = None) -> None:
    _RULES.append(Rule(name, name.split(".")[1], re.compile(_nfkc(pattern)), _nfkc(anchor),
                       re.compile(_nfkc(unless)) if unless else None))


# == English ========================================================================
EN_MAKE = (r"make|making|made|build|building|assembl\w*|construct\w*|manufactur\w*|fabricat\w*|craft|create|rig"
           r"|put together|3d[- ]?print\w*|produce|prepare|mix|wire")
EN_HOWTO = (r"how (?:do i|to|can i|would i|could i|should i)|instructions?|steps?|step[- ]by[- ]step|recipe|tutorial"
            r"|guide|teach me|show me|explain how|diy|homemade|home-made")
EN_WEAPON = (r"(?:pipe|nail|car|dirty|fertili[sz]er|pressure[- ]cooker) bombs?|bombs?|explosives?|ieds?"
             r"|improvised explosive devices?|detonators?|blasting caps?|molotov(?: cocktails?)?|napalm|thermite"
             r"|grenades?|tatp|hmtd|semtex|c-?4 explosive|nerve agents?|sarin|vx (?:gas|nerve)|ricin|weaponi[sz]ed anthrax"
             r"|chemical weapons?|bio-?weapons?|biological weapons?|untraceable (?:guns?|firearms?|pistols?)"
             r"|ghost guns?|auto sears?|gun silencers?|suppressors? for (?:a|my) (?:gun|rifle|pistol)")
EN_WEAPON_STRONG = (r"pipe bombs?|nail bombs?|ieds?|improvised explosive devices?|detonators?|molotov(?: cocktails?)?"
                    r"|napalm|tatp|hmtd|nerve agents?|sarin|ricin|ghost guns?|untraceable (?:guns?|firearms?)"
                    r"|chemical weapons?|bio-?weapons?")
EN_WEAPON_OK = (r"bath ?bombs?|photo ?bomb|bomb of a|(?:flavou?r|calorie|glitter|seed|stink|cherry|f|truth|love)[- ]?bombs?"
                r"|bombed|the bomb\b(?! squad| threat)|da bomb|explosive (?:flavou?r|growth|sales?|news|performance|taste)"
                r"|bomb (?:cyclone|calorimeter)|history|documentary|news|defus\w*|bomb squad")
rule("en.weapons.make", near(EN_MAKE, EN_WEAPON, 5), EN_WEAPON, EN_WEAPON_OK)
rule("en.weapons.howto", near(EN_HOWTO, EN_WEAPON_STRONG, 6), EN_WEAPON_STRONG, EN_WEAPON_OK)
rule("en.weapons.full_auto",
     either(near(r"turn\w*|convert\w*|make|modif\w*", r"full[- ]?auto(?:matic)?", 6),
            r"\b(?:drop[- ]in )?auto sears?\b|\blightning links?\b|\bglock switch(?:es)?\b"),
     r"full[- ]?auto|auto sear|lightning link|glock switch", EN_WEAPON_OK)

EN_SELF_OK = (r"prevent\w*|hotlines?|helplines?|lifeline|crisis line|(?:do ?n[o']?t|never|shouldn'?t) (?:\w+ )?kill"
              r"|kill yourself (?:working|over|laughing|with work|trying)|symptoms?|treat\w*|naloxone|narcan|survivors?")
rule("en.self_harm.method",
     near(r"how (?:do i|to|can i|should i|could i)|(?:best|easiest|quickest|fastest|surest|painless|simplest) ways? to"
          r"|painless(?:ly)?|ways? to|methods? (?:to|of|for)|want to|going to|help me",
          r"kill myself|end my (?:own )?life|commit suicide|hang myself|slit my wrists?|cut myself|overdose|off myself"
          r"|die by suicide|take my (?:own )?life|poison myself", 3),
     r"myself|suicide|life|overdose|wrist", EN_SELF_OK)
rule("en.self_harm.intent_method",
     r"\b(?:end my (?:own )?life|kill myself|commit suicide|take my (?:own )?life)\b.{0,60}?\b(?:quickest|fastest|easiest"
     r"|best|painless|surest|least painful) (?:way|method)", r"life|myself|suicide", EN_SELF_OK)
rule("en.self_harm.encourage",
     either(r"\b(?:just|go|you should|why don'?t you|please|better) (?:\w+ ){0,2}(?:kill(?:ed)?|hang(?:ed)?|off) yourself",
            r"\bkys\b", r"\b(?:you should|go|just|better) (?:just )?(?:die|end your life|cut yourself)",
            r"nobody would miss you if you died", r"the world is better without you\b.{0,30}\b(?:die|kill)"),
     r"yourself|kys|die\b|miss you|without you", EN_SELF_OK)
rule("en.self_harm.dose",
     r"\bhow (?:many|much)\b[\w\s,'-]{0,50}?\b(?:to (?:die|kill myself|end my life)|overdose and die|until i die"
     r"|for a lethal|to be fatal)", r"die|kill myself|end my life|lethal|fatal", EN_SELF_OK)

EN_MINOR = (r"child(?:ren)?|kids?|minors?|underage|under-age|preteens?|pre-teens?|toddlers?|little (?:girls?|boys?)"
            r"|(?:[1-9]|1[0-7])[- ]?(?:years?[- ]old|yo|y/o)|lolis?|shota")
EN_SEXUAL = (r"porn\w*|nudes?|(?:naked|nude|topless) (?:photos?|pictures?|pics|images?|videos?)|sexual (?:stor(?:y|ies)|content"
             r"|images?|photos?|videos?|roleplay|role-play|fantas\w+|acts?|scenes?)|sexy (?:photos?|pics)|erotic\w*"
             r"|lewd|explicit (?:photos?|images?|stor(?:y|ies)|content)|sex with|have sex")
EN_CSAM_OK = (r"report\w*|prevent\w*|protect\w*|awareness|detect\w*|fight\w*|combat\w*|\blaws?\b|illegal|victims?"
              r"|abuse material|safety|educat\w*|consent")
rule("en.csam.sexual_minor", either(near(EN_SEXUAL, EN_MINOR, 7), near(EN_MINOR, EN_SEXUAL, 3)),
     r"porn|nude|naked|topless|sexual|sexy|erotic|lewd|explicit|sex with|have sex", EN_CSAM_OK)

EN_CODE = (r"write|writing|code|coding|create|creating|build|building|make|making|develop\w*|program|generate"
           r"|design|craft|deploy|spread|give me|script|need")
EN_MALWARE = (r"ransomware|keyloggers?|key loggers?|botnets?|trojans?|rootkits?|spyware|stalkerware|info-?stealers?"
              r"|password stealers?|credential (?:stealers?|harvesters?)|(?:computer )?viruse?s?|worms? that"
              r"|malware|malicious (?:code|software|payload|script|macro)s?|remote access trojans?|cryptojack\w*"
              r"|ddos (?:tools?|scripts?|bots?)|zero-?day exploits?|exploit kits?|phishing (?:kit|page|site)s?")
EN_MALWARE_OK = (r"remov\w*|detect\w*|protect\w*|prevent\w*|defen[cs]\w*|clean\w*|scanner|scanning|get rid|recover\w*"
                 r"|decrypt my|infected|analy[sz]\w*|what is|what are|flu\b|vaccine|virus-free|antivirus software for")
rule("en.malware.write", near(EN_CODE, EN_MALWARE, 5),
     r"ransomware|keylogger|key logger|botnet|trojan|rootkit|spyware|stalkerware|stealer|harvester|virus|worm"
     r"|malware|malicious|cryptojack|ddos|zero-?day|exploit kit|phishing", EN_MALWARE_OK)

EN_SYNTH = (r"synthesi[sz]\w*|cook\w*|make|making|manufactur\w*|produc\w*|extract\w*|refin\w*|brew\w*|purif\w*"
            r"|recipe for|precursors? (?:for|of|to)|lab (?:for|to make)|convert\w*|methods? (?:for|of|to make)"
            r"|shake and bake|one[- ]pot|routes? to|steps? (?:for|to make)")
EN_DRUG = (r"meth|methamphetamine|crystal meth|crack cocaine|crack rocks?|cocaine|heroin|fentanyl|carfentanil|lsd"
           r"|mdma|ecstasy pills?|pcp|ghb|krokodil|desomorphine|dmt|mescaline")
EN_DRUG_OK = (r"drug ?stores?|pharmac\w*|rehab\w*|recover\w*|treatment|overdose|naloxone|narcan|test(?:ing)? strips?"
              r"|addict\w*|symptoms?|effects? of|dangers? of|history of|radix|least significant|\bsort\b|awareness")
rule("en.drugs.make", either(near(EN_SYNTH, EN_DRUG, 4), near(EN_DRUG, r"synthesis|recipe|lab setup|cook(?:ing)? guide", 2),
                             r"\b(?:cook|make|rock up)\w* crack\b"),
     r"meth|cocaine|crack|heroin|fentanyl|carfentanil|lsd|mdma|ecstasy|pcp|ghb|krokodil|desomorphine|dmt|mescaline",
     EN_DRUG_OK)

EN_TERROR_GROUP = (r"isis|isil|daesh|islamic state|al[- ]?qaeda|al[- ]?shabaa?b|boko haram|jihadi(?:st)? (?:groups?|cells?)"
                   r"|terrorist (?:groups?|organi[sz]ations?|cells?)")
EN_TERROR_OK = (r"\bwhy\b|research\w*|thesis|study|studies|prevent\w*|counter\w*|radicali[sz]ation|history|news"
                r"|report\w*|article|documentary|victims?|condemn\w*|de-?radicali\w*|memorial|anniversary")
rule("en.terrorism.join",
     near(r"join\w*|pledge\w* allegiance to|recruit\w*(?: \w+)?|fight for|fund\w*|donate to|travel to (?:syria to )?"
          r"(?:join|fight)", EN_TERROR_GROUP, 4),
     EN_TERROR_GROUP, EN_TERROR_OK)
rule("en.terrorism.attack",
     either(near(r"plan\w*|carry out|carrying out|organi[sz]e|execute|stage|commit|launch|conduct|help me|how (?:to|do i)",
                 r"(?:terrorist|terror) attacks?|suicide bombings?|mass shootings?|massacres?|bombing (?:of|at) (?:a|the)"
                 r"|attack on (?:a|the) (?:crowd\w*|concert|school|church|mosque|synagogue|temple|stadium|subway|metro"
                 r"|airport|market|festival|parade)", 4),
            r"kill as many (?:people|civilians) as possible|maximi[sz]e (?:the )?(?:casualties|death toll)"),
     r"attack|bombing|shooting|massacre|as many (?:people|civilians)|casualties|death toll", EN_TERROR_OK)

# == Chinese (Traditional, with common Simplified forms) ================================
ZH_MAKE = r"製作|製造|自製|組裝|做|造|配製|怎麼|如何|教我|步驟|方法|制作|制造|自制|组装|怎么"
ZH_WEAPON = (r"土製炸彈|炸彈|炸藥|汽油彈|燃燒彈|雷管|爆裂物|引爆裝置|管狀炸彈|沙林|神經毒劑|化學武器|生物武器|蓖麻毒素"
             r"|土製槍|改造槍|鬼槍|炸弹|炸药|汽油弹|燃烧弹|化学武器|生物武器")
ZH_WEAPON_OK = r"沐浴|泡澡|入浴|價格|价格|折扣|優惠|优惠|爆漿|炸雞|新聞|新闻|歷史|历史|拆除"
rule("zh.weapons.make", near_chars(ZH_MAKE, ZH_WEAPON, 8), ZH_WEAPON, ZH_WEAPON_OK)
ZH_SELF_OK = r"防治|預防|预防|專線|专线|熱線|热线|求助|諮詢|咨询|協助"
rule("zh.self_harm.method",
     either(r"自殺的?方法|自殺方式|怎麼自殺|如何自殺|怎樣自殺|無痛自殺|自杀的?方法|怎么自杀|如何自杀|无痛自杀",
            r"(?:去|快)死吧|怎麼不去死|怎么不去死|應該去死|应该去死", near_chars(r"教我?|怎麼|怎么|如何|方法", r"割腕|跳樓|跳楼|上吊|燒炭|烧炭", 6),
            near_chars(r"割腕|跳樓|跳楼|上吊|燒炭|烧炭", r"方法|最不痛|不會痛|不会痛|怎麼做|怎么做", 6),
            r"吃多少.{0,8}(?:才會死|會死|致死|才会死|会死)"),
     r"自殺|自杀|死|割腕|跳樓|跳楼|上吊|燒炭|烧炭", ZH_SELF_OK)
ZH_AGE = r"(?<![一二三四五六七八九十])(?:十[一二三四五六七]?|[一二三四五六七八九])歲|(?<!\d)(?:1[0-7]|[1-9]) ?歲"
ZH_SEX = r"色情|情色|性愛|性爱|裸照|裸體|裸体|做愛|做爱"
rule("zh.csam.sexual_minor",
     either(r"兒童色情|儿童色情|幼童色情|幼女色情", near_chars(r"未成年|兒童|儿童|幼女|小女孩|小男孩|蘿莉", ZH_SEX, 8),
            near_chars(ZH_SEX, r"兒童|儿童|未成年|幼女|小女孩|小男孩", 12), near_chars(ZH_AGE, ZH_SEX, 10)),
     ZH_SEX, r"檢舉|举报|舉報|防治|打擊|打击|保護|保护|預防|预防|法律|違法|违法|教育")
rule("zh.malware.write",
     near_chars(r"寫|撰寫|編寫|製作|開發|做|生成|写|编写|制作|开发",
                r"勒索軟體|勒索病毒|木馬程式|木馬病毒|鍵盤側錄|鍵盤記錄|殭屍網路|惡意程式|惡意軟體|電腦病毒|後門程式|間諜軟體"
                r"|勒索软件|木马程序|木马病毒|键盘记录|僵尸网络|恶意软件|电脑病毒|后门程序|间谍软件", 14),
     r"勒索|木馬|木马|鍵盤|键盘|殭屍|僵尸|惡意|恶意|病毒|後門|后门|間諜|间谍",
     r"移除|清除|防範|防范|偵測|检测|掃描|扫描|預防|预防|什麼是|什么是|删除|刪除|中了")
rule("zh.drugs.make",
     near_chars(r"製造|合成|提煉|煉製|製作|自製|做|煮|提純|提纯|制造|提炼|炼制|制作|自制",
                r"冰毒|甲基安非他命|安非他命|海洛因|芬太尼|古柯鹼|可卡因|搖頭丸|摇头丸|k他命|愷他命|lsd|快樂丸|毒品", 8),
     r"冰毒|安非他命|海洛因|芬太尼|古柯鹼|可卡因|搖頭丸|摇头丸|k他命|愷他命|lsd|快樂丸|毒品",
     r"藥局|藥房|药房|戒毒|勒戒|防制|治療|治疗|成癮|成瘾|危害|症狀|症状")
rule("zh.terrorism",
     either(near_chars(r"加入", r"伊斯蘭國|伊斯兰国|isis|蓋達|基地組織|恐怖組織|恐怖组织", 4),
            near_chars(r"策劃|策划|計畫|計劃|计划|發動|发动|實施|实施|執行|执行",
                       r"恐怖攻擊|恐攻|恐怖袭击|自殺式?炸彈攻擊|爆炸案|大規模槍擊|隨機殺人", 10)),
     r"伊斯蘭國|伊斯兰国|isis|蓋達|基地組織|恐怖|恐攻|炸彈攻擊|爆炸案|槍擊|隨機殺人",
     r"新聞|报道|報導|譴責|谴责|反恐|歷史|历史|受害者|紀念|纪念|為什麼|为什么")

# == Indonesian =======================================================================
ID_MAKE = r"membuat|buat|buatkan|bikin|merakit|meracik|rakit|racik|membangun|cara"
ID_WEAPON = (r"bom|bom (?:pipa|rakitan|molotov|ikan)|bahan peledak|peledak|molotov|detonator|granat|napalm"
             r"|senjata api rakitan|senpi rakitan|gas sarin|senjata kimia|senjata biologis")
# Indonesian and Malay share words, so one language's rule meets the other's benign uses.
ID_MS_WEAPON_OK = (r"\b(?:diskon|diskaun|harga|promo|cashback|like|bom waktu|mandi|mandian|bath|sejarah|korban|mangsa"
                   r"|berita|kue|kek|film|filem|jualan|jinak\w*|menjinak\w*)\b")
rule("id.weapons.make", near(ID_MAKE, ID_WEAPON, 4),
     r"\bbom\b|peledak|molotov|detonator|granat|napalm|rakitan|sarin|senjata",
     ID_MS_WEAPON_OK)
ID_SELF_OK = r"\b(?:pencegahan|mencegah|layanan|hotline|konseling|bantuan|bom bunuh diri)\b"
rule("id.self_harm",
     either(r"\bcara (?:untuk )?bunuh diri", r"\bbunuh diri (?:yang|tanpa|dengan cara|paling)",
            r"\b(?:mending|sebaiknya|lebih baik|mendingan) (?:kamu|kau|lu|lo|elu) (?:\w+ )?(?:mati|bunuh diri|mampus)",
            r"\b(?:mati|mampus) (?:saja|aja) (?:kau|kamu|lu|lo)\b",
            r"\b(?:menyayat|sayat|mengiris|iris|memotong) (?:urat )?(?:nadi|pergelangan)",
            r"\bobat tidur (?:supaya|agar|biar|untuk) (?:bisa )?mati",
            r"\bberapa (?:banyak|butir)\b.{0,40}\b(?:supaya|agar|biar|untuk) (?:bisa )?(?:mati|meninggal)"),
     r"bunuh diri|\bmati\b|mampus|\bnadi\b|pergelangan|meninggal", ID_SELF_OK)
ID_SEX = r"porno\w*|pornografi|bugil|telanjang|seks|mesum|cabul|erotis|syur"
ID_MINOR = r"anak(?:-anak)?|bocah|di bawah umur|bawah umur|balita|(?:[1-9]|1[0-7]) tahun"
rule("id.csam.sexual_minor", either(near(ID_SEX, ID_MINOR, 5), near(ID_MINOR, ID_SEX, 3)), ID_SEX,
     r"\b(?:lapor\w*|melaporkan|pencegahan|mencegah|lindungi|melindungi|perlindungan|kampanye|undang\w*|edukasi"
     r"|pendidikan|bahaya|berantas|memberantas)\b")
rule("id.malware.write",
     near(r"membuat|buat|buatkan|bikin|menulis|tulis\w*|kode|coding|membangun|mengembangkan|merakit|cara membuat",
          r"ransomware|keylogger|virus komputer|virus (?:yang|untuk)|trojan|malware|botnet|spyware|rootkit|program jahat"
          r"|perangkat lunak jahat", 5),
     r"ransomware|keylogger|virus|trojan|malware|botnet|spyware|rootkit|program jahat|perangkat lunak jahat",
     r"\b(?:menghapus|hapus|mendeteksi|mencegah|cegah|melindungi|membersihkan|menghilangkan|apa itu|bahaya)\b")
rule("id.drugs.make",
     near(r"membuat|buat|bikin|meracik|racik|memasak|masak|memproduksi|produksi|menyuling|mensintesis|sintesis|mengolah",
          r"sabu(?:-sabu)?|sabu sabu|shabu|metamfetamin|heroin|putaw|fentanil|fentanyl|kokain|ekstasi|lsd|narkoba"
          r"|ganja sintetis|tembakau gorila", 4),
     r"sabu|shabu|metamfetamin|heroin|putaw|fentanil|fentanyl|kokain|ekstasi|lsd|narkoba|sintetis|gorila",
     r"\b(?:toko obat|apotek|rehabilitasi|rehab|bahaya|pencegahan|berantas|memberantas|penyuluhan|dampak|efek|anti)\b")
ID_TERROR_OK = (r"\b(?:berita|sejarah|korban|mencegah|pencegahan|kontra|deradikalisasi|mengutuk|densus|mengapa|kenapa"
                r"|peringatan)\b")
rule("id.terrorism",
     either(near(r"bergabung|gabung|masuk|berbaiat|baiat|merekrut|rekrut",
                 r"isis|negara islam|daesh|al[- ]?qaeda|jamaah islamiyah|jamaah ansharut daulah|jemaah islamiyah"
                 r"|kelompok teroris|organisasi teroris", 3),
            near(r"merencanakan|rencanakan|melakukan|melancarkan|cara|bantu",
                 r"serangan teror|aksi teror|bom bunuh diri|penembakan massal|serangan bom|teror bom", 4)),
     r"isis|negara islam|daesh|qaeda|islamiyah|daulah|teroris|teror|bom bunuh diri|penembakan massal|serangan bom",
     ID_TERROR_OK)

# == Malay ============================================================================
rule("ms.weapons.make",
     near(r"membuat|buat|bina|membina|memasang|pasang|merakit|cara",
          r"bom|bom (?:paip|petrol|buatan sendiri|tangan)|bahan letupan|alat peletup|peletup|molotov|detonator"
          r"|senjata kimia|senjata biologi|gas sarin", 4),
     r"\bbom\b|letupan|peletup|molotov|detonator|senjata|sarin", ID_MS_WEAPON_OK)
rule("ms.self_harm",
     either(r"\bcara (?:untuk )?(?:mem)?bunuh diri", r"\bmembunuh diri (?:yang|tanpa|dengan)",
            r"\b(?:baik|lebih baik|sebaiknya|baiklah) (?:kau|kamu|engkau|awak) (?:\w+ )?mati",
            r"\b(?:mengelar|kelar|menghiris|hiris|memotong) (?:urat )?(?:nadi|pergelangan)",
            r"\bpil tidur (?:untuk|supaya|agar) mati", r"\bberapa (?:biji|banyak)\b.{0,30}\b(?:untuk|supaya|agar) mati"),
     r"bunuh diri|\bmati\b|\bnadi\b|pergelangan",
     r"\b(?:pencegahan|mencegah|talian|bantuan|kaunseling|befrienders)\b")
MS_SEX = r"lucah|bogel|telanjang|seks|porno\w*|pornografi"
MS_MINOR = r"kanak-kanak|budak|bawah umur|di bawah umur|(?:[1-9]|1[0-7]) tahun"
rule("ms.csam.sexual_minor", either(near(MS_SEX, MS_MINOR, 5), near(MS_MINOR, MS_SEX, 3)), MS_SEX,
     r"\b(?:lapor\w*|melaporkan|pencegahan|mencegah|melindungi|perlindungan|kempen|undang-undang|pendidikan|bahaya)\b")
rule("ms.malware.write",
     near(r"buat|membuat|bina|membina|menulis|tulis|kod|membangunkan|mencipta|cipta",
          r"perisian tebusan|perisian hasad|ransomware|keylogger|virus komputer|trojan|malware|botnet|perisian pengintip"
          r"|spyware", 5),
     r"perisian|ransomware|keylogger|virus|trojan|malware|botnet|spyware",
     r"\b(?:membuang|buang|mengesan|mencegah|cegah|melindungi|membersihkan|apakah)\b")
rule("ms.drugs.make",
     near(r"membuat|buat|memproses|proses|memasak|masak|mensintesis|sintesis|menghasilkan|cara membuat",
          r"syabu|sabu|dadah|heroin|metamfetamin|fentanil|kokain|pil ekstasi|ekstasi", 4),
     r"syabu|sabu|dadah|heroin|metamfetamin|fentanil|kokain|ekstasi",
     r"\b(?:bahaya|anti|kempen|pemulihan|rawatan|pencegahan|kedai ubat|farmasi|mencegah|ketagihan)\b")
rule("ms.terrorism",
     either(near(r"menyertai|sertai|bergabung|berbaiat|baiat|merekrut",
                 r"isis|daesh|negara islam|al[- ]?qaeda|jemaah islamiyah|kumpulan pengganas|organisasi pengganas", 3),
            near(r"merancang|rancang|melakukan|melancarkan|bantu|cara",
                 r"serangan pengganas|serangan keganasan|pengeboman|bom berani mati|tembakan beramai-ramai", 4)),
     r"isis|daesh|negara islam|qaeda|islamiyah|pengganas|keganasan|pengeboman|berani mati|beramai-ramai",
     r"\b(?:berita|sejarah|mangsa|mencegah|pencegahan|mengutuk|memperingati)\b")

# == Vietnamese =======================================================================
rule("vi.weapons.make",
     near(r"chế tạo|tự chế|làm|lắp ráp|lắp|chế|cách|hướng dẫn|sản xuất",
          r"bom|thuốc nổ|chất nổ|bom xăng|ngòi nổ|kíp nổ|lựu đạn|súng tự chế|khí sarin|vũ khí hóa học|vũ khí sinh học", 4),
     r"\bbom\b|thuốc nổ|chất nổ|ngòi nổ|kíp nổ|lựu đạn|súng tự chế|sarin|vũ khí",
     r"bom tấn|bom hàng|bom sale|bom giá|bom tắm|khuyến mãi|giảm giá|lịch sử|nạn nhân|tin tức|tháo gỡ")
rule("vi.self_harm",
     either(r"\bcách tự (?:tử|sát|vẫn)", r"\btự (?:tử|sát) (?:thế nào|sao cho|không đau|ít đau|bằng cách)",
            r"\b(?:mày|bạn|mi|cậu) (?:\w+ )?(?:nên|hãy|đi) (?:chết|tự tử)", r"\bchết đi cho (?:rồi|xong)",
            r"\b(?:cách )?rạch (?:cổ tay|tay|cổ)\b", r"\bthuốc ngủ (?:thì|để|là) chết",
            r"\bbao nhiêu viên\b.{0,30}\b(?:chết|tử vong)"),
     r"tự tử|tự sát|tự vẫn|chết|rạch|tử vong",
     r"phòng chống|phòng ngừa|ngăn ngừa|đường dây nóng|hỗ trợ|tư vấn")
VI_SEX = r"khiêu dâm|sex|khỏa thân|khoả thân|nude|đồi trụy|ảnh nóng|clip nóng|truyện người lớn|làm tình"
VI_MINOR = r"trẻ em|trẻ vị thành niên|vị thành niên|bé gái|bé trai|trẻ nhỏ|(?:[1-9]|1[0-7]) tuổi"
rule("vi.csam.sexual_minor", either(r"ấu dâm", near(VI_SEX, VI_MINOR, 5), near(VI_MINOR, VI_SEX, 3)),
     r"ấu dâm|khiêu dâm|sex|khỏa thân|khoả thân|nude|đồi trụy|ảnh nóng|clip nóng|người lớn|làm tình",
     r"tố cáo|báo cáo|phòng chống|ngăn chặn|bảo vệ|luật|tuyên truyền|giáo dục")
rule("vi.malware.write",
     near(r"viết|tạo|làm|lập trình|code|phát triển|xây dựng",
          r"mã độc|phần mềm độc hại|virus máy tính|ransomware|keylogger|trojan|botnet|phần mềm gián điệp|spyware", 5),
     r"mã độc|phần mềm độc hại|virus|ransomware|keylogger|trojan|botnet|gián điệp|spyware",
     r"\b(?:gỡ|xóa|xoá|phát hiện|phòng chống|bảo vệ khỏi|là gì)\b")
rule("vi.drugs.make",
     near(r"điều chế|nấu|chế|làm|tổng hợp|sản xuất|tinh chế",
          r"ma túy(?: đá)?|ma tuý(?: đá)?|hàng đá|heroin|bạch phiến|fentanyl|cocaine|thuốc lắc|lsd|methamphetamine|meth", 4),
     r"ma túy|ma tuý|hàng đá|heroin|bạch phiến|fentanyl|cocaine|thuốc lắc|lsd|meth",
     r"nhà thuốc|hiệu thuốc|cai nghiện|phòng chống|tác hại|nguy hiểm|tuyên truyền")
rule("vi.terrorism",
     either(near(r"gia nhập|tham gia|đi theo", r"is|isis|nhà nước hồi giáo|al[- ]?qaeda|tổ chức khủng bố|nhóm khủng bố", 2),
            near(r"lên kế hoạch|thực hiện|tiến hành|giúp tôi|cách",
                 r"tấn công khủng bố|khủng bố|đánh bom tự sát|xả súng hàng loạt|đánh bom", 4)),
     r"gia nhập|tham gia|đi theo|khủng bố|đánh bom|xả súng",
     r"tin tức|lịch sử|nạn nhân|lên án|chống khủng bố|phòng chống|tưởng niệm|\bvụ\b")

# == Thai =============================================================================
TH_MAKE = r"ทำ|สร้าง|ประกอบ|ผลิต|ประดิษฐ์"
TH_WEAPON = (r"ลูกระเบิด|วัตถุระเบิด|ดินระเบิด|ระเบิดแสวงเครื่อง|ระเบิดปิงปอง|ระเบิดขวด|ระเบิดเพลิง|ระเบิดท่อ|ระเบิดมือ"
             r"|ปืนไทยประดิษฐ์|ปืนเถื่อน|อาวุธเคมี|อาวุธชีวภาพ|ก๊าซซาริน")
rule("th.weapons.make", either(near_chars(TH_MAKE, TH_WEAPON, 10), r"(?:วิธี|สอน)?(?:ทำ|สร้าง|ประกอบ)ระเบิด(?!ความ|รส|ราคา)"),
     r"ระเบิด|ปืนไทยประดิษฐ์|ปืนเถื่อน|อาวุธเคมี|อาวุธชีวภาพ|ซาริน",
     r"ความอร่อย|ระเบิดความ|ลดราคา|โปรโมชั่น|บาธบอมบ์|อาบน้ำ|แช่น้ำ|ข่าว|ประวัติ|เก็บกู้")
rule("th.self_harm",
     either(r"วิธีฆ่าตัวตาย|ฆ่าตัวตาย(?:ยังไง|อย่างไร|แบบไม่เจ็บ|แบบไหน|ให้ตาย)", r"ไปตายซะ|ไปตายเถอะ|ควรไปตาย|ไปตายไป",
            r"(?:สอน|วิธี)กรีดข้อมือ", r"กินยา.{0,12}กี่เม็ด.{0,10}ตาย"),
     r"ฆ่าตัวตาย|ตาย|กรีดข้อมือ", r"ป้องกัน|สายด่วน|ช่วยเหลือ|ปรึกษา")
TH_MINOR = r"เด็ก|ผู้เยาว์|อายุต่ำกว่า ?18|(?:[1-9]|1[0-7]) ?ขวบ"
rule("th.csam.sexual_minor",
     either(r"(?:สื่อ|ภาพ|คลิป|หนัง)(?:ลามก|โป๊|อนาจาร)เด็ก",
            near_chars(r"ลามก|โป๊|เปลือย|อนาจาร|เซ็กซ์", TH_MINOR, 15), near_chars(TH_MINOR, r"ลามก|โป๊|เปลือย|อนาจาร|เซ็กซ์", 15)),
     r"ลามก|โป๊|เปลือย|อนาจาร|เซ็กซ์", r"แจ้ง|รายงาน|ป้องกัน|ปกป้อง|กฎหมาย|เบาะแส")
rule("th.malware.write",
     near_chars(r"เขียน|สร้าง|ทำ|พัฒนา|โค้ด",
                r"แรนซัมแวร์|มัลแวร์|ไวรัสคอมพิวเตอร์|คีย์ล็อกเกอร์|keylogger|โทรจัน|trojan|บอตเน็ต|สปายแวร์|ransomware", 10),
     r"แรนซัมแวร์|มัลแวร์|ไวรัสคอมพิวเตอร์|คีย์ล็อกเกอร์|keylogger|โทรจัน|trojan|บอตเน็ต|สปายแวร์|ransomware",
     r"(?<!ห)ลบ|กำจัด|ตรวจจับ|สแกน|คืออะไร")   # หลบ (to dodge) is not ลบ (to delete)
rule("th.drugs.make",
     near_chars(r"ผลิต|ทำ|สังเคราะห์|ต้ม|สกัด",
                r"ยาบ้า|ยาไอซ์|เฮโรอีน|เมทแอมเฟตามีน|โคเคน|เฟนทานิล|ยาอี(?!ก)|แอลเอสดี|lsd", 8),
     r"ยาบ้า|ยาไอซ์|เฮโรอีน|เมทแอมเฟตามีน|โคเคน|เฟนทานิล|ยาอี|แอลเอสดี|lsd",
     r"ร้านขายยา|บำบัด|ป้องกัน|โทษ|อันตราย|เลิก")
rule("th.terrorism",
     either(r"เข้าร่วม(?:กลุ่ม)?(?:ไอเอส|ไอซิส|isis|ก่อการร้าย|อัลกออิดะห์)", r"(?:วางแผน|ลงมือ|ก่อเหตุ)(?:การ)?ก่อการร้าย",
            near_chars(r"วางแผน", r"วางระเบิด|กราดยิง", 10)),
     r"ไอเอส|ไอซิส|isis|ก่อการร้าย|อัลกออิดะห์|วางระเบิด|กราดยิง",
     r"ข่าว|ประวัติ|เหยื่อ|ต่อต้าน|ประณาม|ป้องกัน|รำลึก")

# == Portuguese =======================================================================
rule("pt.weapons.make",
     near(r"fazer|faça|fabricar|fabrique|montar|monte|construir|construa|preparar|prepare|criar|crie|produzir"
          r"|produza",
          r"bombas?(?: caseiras?)?|explosivos?|coquetel molotov|molotov|detonador(?:es)?|granadas?|napalm|gás sarin"
          r"|armas? químicas?|armas? biológicas?|arma fantasma|silenciador", 4),
     r"bomba|explosivo|molotov|detonador|granada|napalm|sarin|armas? (?:química|biológica|fantasma)|silenciador",
     r"(?:d'|d’|de )água|hidráulica|de chocolate|de creme|de vácuo|de combustível|\bde ar\b|de piscina|de insulina"
     r"|calórica|de sementes|de banho|de pneu|de bicicleta|de chuva|de gasolina|notícias?|história|desarmar")
rule("pt.self_harm",
     either(r"\bcomo (?:me|se|eu posso me) matar", r"\bcomo (?:cometer suicídio|me suicidar|se suicidar)",
            r"\b(?:forma|maneira|jeito|modo)s? (?:\w+ )?(?:indolor|menos dolorosa|mais fácil|rápid[ao]) de (?:me |se )?"
            r"(?:matar|morrer|suicidar)",
            r"\b(?:vai|vá) se matar", r"\bse mat[ae] logo", r"\b(?:você|vc) deveria se matar",
            r"\bcomo cortar (?:os|meus) pulsos", r"\bcomprimidos\b.{0,45}\bpara (?:morrer|me matar)"),
     r"matar|suicid|morrer|pulsos",
     r"\b(?:prevenção|cvv|setembro amarelo|ajuda|apoio)\b")
PT_SEX = r"pornografia|pornô|porno|nu(?:a|s|as)?|pelad[ao]s?|eróticas?|erótico|sexo|sexual|íntimas"
PT_MINOR = r"infantil|crianças?|menores? de idade|de menores|menin[ao]s? de (?:[1-9]|1[0-7]) anos|(?:[1-9]|1[0-7]) anos"
rule("pt.csam.sexual_minor", either(near(PT_SEX, PT_MINOR, 5), near(PT_MINOR, PT_SEX, 3)),
     r"pornogra|pornô|porno|\bnu(?:a|s|as)?\b|pelad|erótic|sexo|sexual|íntimas",
     r"\b(?:denunciar|denúncia|combate|combater|prevenção|prevenir|proteger|proteção|lei|educação)\b")
rule("pt.malware.write",
     near(r"criar|crie|fazer|faça|escrever|escreva|programar|programe|desenvolver|desenvolva|codificar|codifique"
          r"|montar|monte|gerar|gere",
          r"ransomware|keylogger|vírus de computador|vírus que|cavalo de troia|trojan|malware|botnet|spyware|rootkit"
          r"|programa malicioso|software malicioso", 5),
     r"ransomware|keylogger|vírus|cavalo de troia|trojan|malware|botnet|spyware|rootkit|malicioso",
     r"\b(?:remover|remoção|detectar|proteger|prevenir|limpar|recuperar|o que é)\b")
rule("pt.drugs.make",
     near(r"fazer|faça|fabricar|fabrique|sintetizar|sintetize|produzir|produza|cozinhar|cozinhe|refinar|refine"
          r"|preparar|prepare|extrair|extraia",
          r"metanfetamina|cocaína|crack|heroína|fentanil|ecstasy|mdma|lsd|pasta base|oxi", 4),
     r"metanfetamina|cocaína|crack|heroína|fentanil|ecstasy|mdma|lsd|pasta base|oxi",
     r"\b(?:drogaria|farmácia|reabilitação|tratamento|prevenção|combate|efeitos?|personagem|história|romance|livro"
     r"|filme|protagonista|trabalho escolar)\b")
rule("pt.terrorism",
     either(near(r"juntar|entrar|aderir|unir|alistar|ingressar",
                 r"estado islâmico|isis|al[- ]?qaeda|grupo terrorista|organização terrorista", 4),
            near(r"planejar|realizar|executar|cometer|organizar|ajude|como",
                 r"atentados?(?: terroristas?)?|ataques? terroristas?|massacre|tiroteio em massa|ataque a bomba", 4)),
     r"estado islâmico|isis|qaeda|terrorista|atentado|massacre|tiroteio|ataque a bomba",
     r"\b(?:notícias?|história|vítimas|condenar|antiterrorismo|homenagem|memorial|por que)\b")

RULES: tuple[Rule, ...] = tuple(sorted(_RULES, key=lambda r: r.category))
CATEGORIES = ("weapons", "self_harm", "csam", "malware", "drugs", "terrorism")
LANGUAGES = ("en", "zh-TW", "id", "vi", "th", "pt", "ms")
