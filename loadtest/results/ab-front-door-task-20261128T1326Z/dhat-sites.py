# dhat-sites.py A.json B.json: allocation sites whose totals differ between two
# valgrind --tool=dhat runs, named by the first frame in pushgate's code.
import json,sys,collections
def sites(path):
    d=json.load(open(path))
    ftbl=d['ftbl']
    c=collections.Counter(); b=collections.Counter()
    for pp in d['pps']:
        name='?'
        for f in pp['fs']:
            fr=ftbl[f]
            if 'pushgate' in fr and 'alloc::' not in fr.split(':')[0]:
                name=fr; break
        # shorten
        name=name.split(': ',1)[-1][:150]
        c[name]+=pp['tb']; b[name]+=pp['tbk']
    return c,b
ca,ba=sites(sys.argv[1]); cb,bb=sites(sys.argv[2])
keys=set(ca)|set(cb)
rows=sorted(keys,key=lambda k:-(abs(ca[k]-cb[k])*10000+abs(ba[k]-bb[k])))
for k in rows[:14]:
    if ca[k]!=cb[k] or ba[k]!=bb[k]:
        print(f"bytes {ca[k]:8d} {cb[k]:8d}  blocks {ba[k]:5d} {bb[k]:5d}  {k}")
