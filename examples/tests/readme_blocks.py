"""readme_blocks.py README.md HEADING OUTDIR: writes the indented code blocks of the README section
whose `## ` heading starts with HEADING, in order, as OUTDIR/block1.sh, block2.txt, block3.txt, ...
(the first .sh, the others .txt), dedented, so a test runs what the README shows as it is shown."""
import os
import sys


def section_blocks(text: str, heading: str):
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## " + heading))
    blocks, current = [], []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("    ") or (current and not line.strip()):
            current.append(line[4:])
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return ["\n".join(block).strip("\n") + "\n" for block in blocks]


def main() -> None:
    readme, heading, out = sys.argv[1:]
    with open(readme) as f:
        blocks = section_blocks(f.read(), heading)
    if not blocks:
        sys.exit("readme_blocks.py: no code block under '## %s' in %s" % (heading, readme))
    for n, block in enumerate(blocks, 1):
        with open(os.path.join(out, "block%d.%s" % (n, "sh" if n == 1 else "txt")), "w") as f:
            f.write(block)


if __name__ == "__main__":
    main()
