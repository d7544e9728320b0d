"""The README keeps its promises: the two commands first, and a configuration reference equal to the traits."""


from tests.support.paths import REPO
from workspacespawner.configdoc import BEGIN, END, reference

README = REPO / "README.md"


def test_configuration_reference_matches_traits():
    text = README.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == reference(), "run: python -m workspacespawner.configdoc and paste into README.md"


def test_readme_starts_with_demo_and_test_commands():
    block = README.read_text().split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert commands[0].endswith("workspacespawner demo")
    assert "pytest" in commands[1]
