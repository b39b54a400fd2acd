"""The chapters as the site reads them: title, summary, claims held and takeaways, from the executed notebook."""

import json

import nbformat
import pandas as pd
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from lib.make.site import chapters


def test_claims_are_counted_and_missing_claims_said_so():
    chapter = chapters.Chapter("09_x", "9. X", "", None, None, None, None)
    assert chapter.claims_summary() == "no claims recorded"
    chapter.claims = pd.DataFrame({"claim": list("abcd"), "verdict": ["held", "held", "did not hold", "not measured"]})
    assert chapter.claims_summary() == "4 claims: 2 held, 1 did not hold, 1 not measured"


def test_a_chapter_is_read_from_its_notebook_provenance_and_claims(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01_demo.py").write_text("# %%\n")
    (tmp_path / "notebooks" / "02_never_run.py").write_text("# %%\n")
    decided = new_output("display_data", data={"text/markdown": "**The data decided this.**"})
    notebook = new_notebook(cells=[
        new_markdown_cell("# 1. Demo\n\nIt *measures* one thing. Then another."),
        new_markdown_cell("## Takeaways\n\n* Written by hand."), new_code_cell("show()", outputs=[decided]),
        new_markdown_cell("# Next part\n\nNot a takeaway.")], metadata={"papermill": {"duration": 12.5}})
    nbformat.write(notebook, tmp_path / "notebooks" / "01_demo.ipynb")
    (tmp_path / "data" / "01_demo").mkdir(parents=True)
    (tmp_path / "data" / "01_demo" / "provenance.json").write_text(json.dumps({"device": "cpu"}))
    (tmp_path / "data" / "01_demo" / "claims.csv").write_text("claim,verdict\na,held\n")
    (tmp_path / "data" / "01_demo" / "sweep.csv").write_text("dtype,ms\nfp32,1\nbf16,2\nfp32,3\n")
    (tmp_path / "data" / "01_demo" / "beside.csv").write_text("source,dtype\nthis machine,fp32\nreference,fp16\n")
    demo, never = chapters.load_chapters(tmp_path)
    assert demo.measured_dtypes == ("fp32", "bf16") and never.measured_dtypes == ()
    assert (demo.title, demo.summary, demo.run_seconds, demo.page) == ("1. Demo", "It measures one thing.", 12.5,
                                                                      "01_demo.html")
    assert demo.provenance == {"device": "cpu"} and demo.claims_summary() == "1 claim: 1 held"
    assert chapters.takeaways(demo) == "* Written by hand.\n\n**The data decided this.**"
    assert (never.title, never.notebook, chapters.takeaways(never)) == ("02_never_run", None, "")
